package katamem

import "encoding/json"

// The schema names of the documents this package reads and writes
// (kata_mem/schemas/shim-request.v1.json and shim-response.v1.json).
const (
	RequestSchema  = "kata-mem/shim-request/v1"
	ResponseSchema = "kata-mem/shim-response/v1"
	ErrorSchema    = "kata-mem/error/v1"
	NodeSchema     = "kata-mem/node/v1"
	StatusSchema   = "kata-mem/status/v1"
)

// Event is what happened to the sandbox: the request's "event".
type Event string

// The events of the shim protocol.
const (
	EventCreate    Event = "create"
	EventUpdate    Event = "update"
	EventDelete    Event = "delete"
	EventReconcile Event = "reconcile"
	// EventUpdateSandbox is CRI UpdatePodSandboxResources: SandboxResources (and
	// Overhead) carry the pod's new resources.
	EventUpdateSandbox Event = "update-sandbox"
)

// ShimRequest is one kata-mem/shim-request/v1 document (POST /v1/shim). A nil
// pointer, slice or map is left out, which the service reads as null.
type ShimRequest struct {
	// Schema is RequestSchema; Client.Shim fills it in when it is empty.
	Schema    string `json:"schema"`
	SandboxID string `json:"sandbox_id"`
	Event     Event  `json:"event"`
	// Config is the Kata configuration's absolute path; nil: where Kata looks.
	Config     *string     `json:"config,omitempty"`
	Containers []Container `json:"containers,omitempty"`
	// Backend is the sandbox's VMM; required when Apply is set (but on delete).
	Backend     *Backend       `json:"backend,omitempty"`
	Apply       bool           `json:"apply,omitempty"`
	AllowShrink bool           `json:"allow_shrink,omitempty"`
	Host        *HostOverrides `json:"host,omitempty"`
	// Annotations are the CRI sandbox-sizing annotations (io.kubernetes.cri.sandbox-*,
	// CRI-O's pod-linux-resources) and Kata's io.katacontainers.config.hypervisor.*.
	Annotations map[string]string `json:"annotations,omitempty"`
	// PodResources are the pod-level limits (KEP-2837, spec.resources.limits); nil: none.
	PodResources *PodResources `json:"pod_resources,omitempty"`
	// SandboxResources are UpdatePodSandboxResourcesRequest.resources (event
	// update-sandbox only); Overhead is its overhead (the RuntimeClass's).
	SandboxResources *Resources `json:"sandbox_resources,omitempty"`
	Overhead         *Resources `json:"overhead,omitempty"`
}

// Resources are the CRI LinuxContainerResources kata-mem reads for a pod resize.
type Resources struct {
	// MemoryLimitBytes nil, 0 or negative: no limit.
	MemoryLimitBytes *int64 `json:"memory_limit_bytes,omitempty"`
	CPUQuota         *int64 `json:"cpu_quota,omitempty"`
	CPUPeriod        *int64 `json:"cpu_period,omitempty"`
}

// HugepageLimit is the limit of one hugepage size (CRI HugepageLimit, in bytes).
type HugepageLimit struct {
	PageSizeBytes int64 `json:"page_size_bytes"`
	LimitBytes    int64 `json:"limit_bytes"`
}

// PodResources are a pod's pod-level limits, in the containers' units.
type PodResources struct {
	// MemoryLimitBytes nil, 0 or negative: none.
	MemoryLimitBytes    *int64 `json:"memory_limit_bytes,omitempty"`
	HugepagesLimitBytes *int64 `json:"hugepages_limit_bytes,omitempty"`
	// HugepageLimits is the limit of each page size; HugepagesLimitBytes, when
	// set too, must be their sum.
	HugepageLimits []HugepageLimit `json:"hugepage_limits,omitempty"`
	CPUQuota       *int64          `json:"cpu_quota,omitempty"`
	CPUPeriod      *int64          `json:"cpu_period,omitempty"`
}

// Container is one container of the sandbox, as its OCI spec sizes it.
type Container struct {
	ID string `json:"id"`
	// State is "running" (the default), "created" or "stopped".
	State string `json:"state,omitempty"`
	// Role is "app" (the default), "init" or "sidecar".
	Role string `json:"role,omitempty"`
	// MemoryLimitBytes nil, 0 or negative: no limit.
	MemoryLimitBytes    *int64          `json:"memory_limit_bytes,omitempty"`
	HugepagesLimitBytes *int64          `json:"hugepages_limit_bytes,omitempty"`
	HugepageLimits      []HugepageLimit `json:"hugepage_limits,omitempty"`
	CPUQuota            *int64          `json:"cpu_quota,omitempty"`
	CPUPeriod           *int64          `json:"cpu_period,omitempty"`
	Cpuset              *string         `json:"cpuset,omitempty"`
}

// Backend is the sandbox's VMM: QMP (Type "qmp", Socket) or libvirt (Type
// "libvirt", URI, Domain).
type Backend struct {
	Type   string `json:"type"`
	Socket string `json:"socket,omitempty"`
	URI    string `json:"uri,omitempty"`
	Domain string `json:"domain,omitempty"`
	// VMM is written by kata-mem in the requests it saves (GET /v1/node shows it);
	// a shim leaves it nil.
	VMM *VMM `json:"vmm,omitempty"`
}

// VMM identifies the process a QMP socket led to when kata-mem applied.
type VMM struct {
	Device   uint64 `json:"device"`
	Inode    uint64 `json:"inode"`
	OwnerUID uint32 `json:"owner_uid"`
	PeerUID  uint32 `json:"peer_uid"`
	PeerPID  *int32 `json:"peer_pid,omitempty"`
}

// HostOverrides replace what the host probe finds, as the CLI's --host-* options.
type HostOverrides struct {
	MemoryBytes *int64     `json:"memory_bytes,omitempty"`
	CPUs        *int64     `json:"cpus,omitempty"`
	Cgroup      *string    `json:"cgroup,omitempty"`
	Arch        *string    `json:"arch,omitempty"`
	Hugepages   *Hugepages `json:"hugepages,omitempty"`
}

// Hugepages is the host's hugepage pool.
type Hugepages struct {
	Count     int64 `json:"count"`
	SizeBytes int64 `json:"size_bytes"`
}

// ShimResponse is one kata-mem/shim-response/v1 document. An error response has
// Error set, no SandboxID, and a nil Plan and Outcome; Client.Shim returns it as
// an *Error as well.
type ShimResponse struct {
	Schema    string   `json:"schema"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	Plan      *Plan    `json:"plan"`
	Outcome   *Outcome `json:"outcome"`
	Warnings  []string `json:"warnings"`
	Error     *Failure `json:"error,omitempty"`
	// CRI is what a shim answers the kubelet's UpdatePodSandboxResources with,
	// verbatim, when the service says it (the update-sandbox event).
	CRI *CRI `json:"cri,omitempty"`
}

// CRI is a gRPC status for the CRI call the request answers.
type CRI struct {
	// Code is "OK", "Unavailable" (retry later), "FailedPrecondition",
	// "InvalidArgument" or "Internal"; GRPCCode is its number (0, 14, 9, 3, 13).
	Code     string `json:"code"`
	GRPCCode int    `json:"grpc_code"`
	Message  string `json:"message"`
}

// Failure is the "error" object of an error document.
type Failure struct {
	Kind     string `json:"kind"`
	Message  string `json:"message"`
	ExitCode int    `json:"exit_code"`
}

// Plan is what kata-mem would do (kata-mem/plan/v1). Sizes in MiB.
type Plan struct {
	Schema   string     `json:"schema"`
	Config   PlanConfig `json:"config"`
	Memory   Memory     `json:"memory"`
	VCPUs    VCPUs      `json:"vcpus"`
	Warnings []string   `json:"warnings"`
}

// PlanConfig names the Kata configuration the plan read, and how Kata sizes the
// sandbox with it.
type PlanConfig struct {
	Path       string `json:"path"`
	Hypervisor string `json:"hypervisor"`
	// Runtime is the Kata runtime the configuration is for: "go" or "runtime-rs".
	Runtime string `json:"runtime"`
	// StaticSandboxResourceMgmt: Kata sizes the VM at boot and never resizes it
	// (so container events are kata-mem's too).
	StaticSandboxResourceMgmt bool `json:"static_sandbox_resource_mgmt"`
}

// Memory is the memory part of a plan.
type Memory struct {
	HostMiB          int64       `json:"host_mib"`
	ConfiguredMaxMiB int64       `json:"configured_max_mib"`
	MaxMiB           int64       `json:"max_mib"`
	BaseMiB          int64       `json:"base_mib"`
	RequestedMiB     int64       `json:"requested_mib"`
	TargetMiB        int64       `json:"target_mib"`
	CurrentMiB       int64       `json:"current_mib"`
	DeltaMiB         int64       `json:"delta_mib"`
	Mechanism        string      `json:"mechanism"`
	BlockMiB         int64       `json:"block_mib"`
	ClampedBy        []string    `json:"clamped_by"`
	Clamps           []Clamp     `json:"clamps"`
	Shrink           bool        `json:"shrink"`
	Steps            []Step      `json:"steps"`
	Sizing           Sizing      `json:"sizing"`
	HostCgroup       *HostCgroup `json:"host_cgroup"`
	HostCgroupUnseen *Unseen     `json:"host_cgroup_unseen"`
	Node             *NodeBudget `json:"node"`
	Workload         Workload    `json:"workload"`
	// Guest is the guest's own ceiling (issue 23), nil where none applies.
	Guest *GuestCeiling `json:"guest,omitempty"`
	// GuestPolicy is how the plan takes the guest to online hot-added memory, and
	// why: kernel onlining stages a grow and keeps DIMMs from being unplugged.
	GuestPolicy *GuestPolicy `json:"guest_policy"`
}

// GuestPolicy is the onlining a plan assumed and where it came from.
type GuestPolicy struct {
	// Onlining is "movable" or "kernel".
	Onlining       string `json:"onlining"`
	OnliningFrom   string `json:"onlining_from"`
	MemmapOnMemory string `json:"memmap_on_memory"`
	// MovableRatio is memory_hotplug.auto_movable_ratio under auto-movable, else nil.
	MovableRatio *int64 `json:"movable_ratio"`
}

// GuestCeiling is the hot-added memory the guest's kernel can describe with struct
// pages paid from its kernel-zone memory, and the arithmetic of it.
type GuestCeiling struct {
	Onlining         string `json:"onlining"`
	OnliningFrom     string `json:"onlining_from"`
	MemmapOnMemory   string `json:"memmap_on_memory"`
	PageKiB          int64  `json:"page_kib"`
	StructPageBytes  int64  `json:"struct_page_bytes"`
	KernelMemoryMiB  int64  `json:"kernel_memory_mib"`
	MemmapPluggedMiB int64  `json:"memmap_plugged_mib"`
	EstimateMiB      int64  `json:"estimate_mib"`
	ReadingMiB       *int64 `json:"reading_mib"`
	AvailableMiB     int64  `json:"available_mib"`
	HeadroomMiB      int64  `json:"headroom_mib"`
	RoomMiB          int64  `json:"room_mib"`
	AddableMiB       int64  `json:"addable_mib"`
	LimitMiB         int64  `json:"limit_mib"`
	Staged           bool   `json:"staged"`
}

// Unseen says why the VM's host cgroup could not be seen: reason
// "vmm_pid_unknown", "not_reachable" or "unreadable". A grow is then held.
type Unseen struct {
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// Workload is what a plan was sized from, each part with where it came from:
// "containers", "pod_resources" (KEP-2837) or "cri_annotations".
type Workload struct {
	MemoryMiB        int64   `json:"memory_mib"`
	MemoryFrom       string  `json:"memory_from"`
	HugepagesMiB     int64   `json:"hugepages_mib"`
	HugepagesFrom    string  `json:"hugepages_from"`
	CPUs             float64 `json:"cpus"`
	CPUsFrom         string  `json:"cpus_from"`
	PodResourcesFrom *string `json:"pod_resources_from"`
}

// Clamp is one limit that lowered the memory target.
type Clamp struct {
	Cause    string `json:"cause"`
	LimitMiB int64  `json:"limit_mib"`
	Detail   string `json:"detail"`
}

// Step is one hotplug step, planned or done.
type Step struct {
	Action   string `json:"action"`
	SizeMiB  int64  `json:"size_mib"`
	Device   string `json:"device"`
	DeltaMiB int64  `json:"delta_mib"`
	TotalMiB int64  `json:"total_mib"`
}

// Sizing is the sizing model the plan followed.
type Sizing struct {
	Model           string  `json:"model"`
	PodOverheadMiB  *int64  `json:"pod_overhead_mib"`
	PodOverheadFrom *string `json:"pod_overhead_from"`
}

// HostCgroup is the VM's host memory cgroup, as the plan read it.
type HostCgroup struct {
	Path           string        `json:"path"`
	Version        int           `json:"version"`
	FoundBy        string        `json:"found_by"`
	LimitMiB       *int64        `json:"limit_mib"`
	Limits         []CgroupLimit `json:"limits"`
	UsageMiB       *int64        `json:"usage_mib"`
	UsageAfterMiB  *int64        `json:"usage_after_mib"`
	VMMOverheadMiB *int64        `json:"vmm_overhead_mib"`
}

// CgroupLimit is one limit of the cgroup or a cgroup above it.
type CgroupLimit struct {
	Path     string `json:"path"`
	LimitMiB int64  `json:"limit_mib"`
	UsageMiB *int64 `json:"usage_mib"`
}

// NodeBudget is the node's memory budget, as the plan read it.
type NodeBudget struct {
	HostMiB            int64  `json:"host_mib"`
	ReservedMiB        int64  `json:"reserved_mib"`
	BudgetMiB          *int64 `json:"budget_mib"`
	CommittedOthersMiB *int64 `json:"committed_others_mib"`
	AvailableMiB       *int64 `json:"available_mib"`
}

// VCPUs is the CPU part of a plan.
type VCPUs struct {
	Host      int64    `json:"host"`
	Max       int64    `json:"max"`
	Default   float64  `json:"default"`
	Requested float64  `json:"requested"`
	Target    int64    `json:"target"`
	ClampedBy []string `json:"clamped_by"`
}

// Outcome is what came of an applied request (kata-mem/outcome/v1). Deferred and
// Infeasible are outcomes, not errors.
type Outcome struct {
	Schema      string   `json:"schema"`
	Sandbox     string   `json:"sandbox"`
	Status      string   `json:"status"`
	Reason      string   `json:"reason"`
	Message     string   `json:"message"`
	ObservedMiB int64    `json:"observed_mib"`
	TargetMiB   int64    `json:"target_mib"`
	Steps       []Step   `json:"steps"`
	RetryAfterS *float64 `json:"retry_after_s"`
	Warnings    []string `json:"warnings"`
}

// Node is GET /v1/node: kata-mem status --all --json (kata-mem/node/v1).
type Node struct {
	Schema         string        `json:"schema"`
	StateDir       string        `json:"state_dir"`
	StateDirExists bool          `json:"state_dir_exists"`
	HostMiB        int64         `json:"host_mib"`
	ReservedMiB    int64         `json:"reserved_mib"`
	BudgetMiB      *int64        `json:"budget_mib"`
	CommittedMiB   int64         `json:"committed_mib"`
	Sandboxes      []NodeSandbox `json:"sandboxes"`
	Skipped        []string      `json:"skipped"`
}

// NodeSandbox is one sandbox of the node's state directory.
type NodeSandbox struct {
	Sandbox    string   `json:"sandbox"`
	Backend    *Backend `json:"backend"`
	CurrentMiB *int64   `json:"current_mib"`
	TargetMiB  *int64   `json:"target_mib"`
	State      string   `json:"state"`
	Reason     string   `json:"reason"`
}

// SandboxStatus is GET /v1/sandboxes/ID: kata-mem status --json
// (kata-mem/status/v1), what the VM says now and the sandbox's journal.
type SandboxStatus struct {
	Schema         string      `json:"schema"`
	BaseMiB        int64       `json:"base_mib"`
	PluggedMiB     int64       `json:"plugged_mib"`
	TotalMiB       int64       `json:"total_mib"`
	Slots          int64       `json:"slots"`
	SlotsUsed      int64       `json:"slots_used"`
	DeviceSpaceMiB *int64      `json:"device_space_mib"`
	Devices        []Device    `json:"devices"`
	Orphans        []string    `json:"orphans"`
	Unproven       []string    `json:"unproven"`
	Guest          *GuestUsage `json:"guest"`
	// Journal is the sandbox's journal record as kata-mem keeps it (null: none).
	Journal json.RawMessage `json:"journal"`
}

// Device is one memory device of the VM.
type Device struct {
	ID            string  `json:"id"`
	Kind          string  `json:"kind"`
	SizeMiB       int64   `json:"size_mib"`
	RequestedMiB  int64   `json:"requested_mib"`
	MaxMiB        int64   `json:"max_mib"`
	BlockMiB      float64 `json:"block_mib"`
	Slot          *int64  `json:"slot"`
	Memdev        string  `json:"memdev"`
	Ours          bool    `json:"ours"`
	PendingUnplug bool    `json:"pending_unplug"`
}

// GuestUsage is what the guest last reported through its balloon statistics.
type GuestUsage struct {
	TotalMiB     *int64   `json:"total_mib"`
	AvailableMiB *int64   `json:"available_mib"`
	FreeMiB      *int64   `json:"free_mib"`
	UsedMiB      *int64   `json:"used_mib"`
	AgeS         *float64 `json:"age_s"`
}

// Int64 returns a pointer to v, for the request's optional numbers.
func Int64(v int64) *int64 { return &v }

// String returns a pointer to v, for the request's optional strings.
func String(v string) *string { return &v }
