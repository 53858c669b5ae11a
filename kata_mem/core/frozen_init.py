"""The __init__ of every frozen record, compiled to bytecode ahead of time.

Written by scripts/write_frozen_init.py from kata_mem.core.frozen.init_source; do not
edit (tests/unit/test_frozen.py checks it is what the script writes)."""

__frozen_set = object.__setattr__
__frozen_missing = type('factory', (), {'__repr__': lambda self: '<factory>'})()


def make_kata_mem_core_backing_MemoryBackend(D, F):
    def __init__(self, kind, mem_path=D[0], share=D[1], why=D[2]):
        __frozen_set(self, 'kind', kind)
        __frozen_set(self, 'mem_path', mem_path)
        __frozen_set(self, 'share', share)
        __frozen_set(self, 'why', why)
    return __init__


def make_kata_mem_core_endpoint_Endpoint(D, F):
    def __init__(self, kind, target, domain=D[0], vmm=D[1], saved=D[2]):
        __frozen_set(self, 'kind', kind)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'domain', domain)
        __frozen_set(self, 'vmm', vmm)
        __frozen_set(self, 'saved', saved)
        self.__post_init__()
    return __init__


def make_kata_mem_core_endpoint_VmmIdentity(D, F):
    def __init__(self, device, inode, owner_uid, peer_uid, peer_pid=D[0]):
        __frozen_set(self, 'device', device)
        __frozen_set(self, 'inode', inode)
        __frozen_set(self, 'owner_uid', owner_uid)
        __frozen_set(self, 'peer_uid', peer_uid)
        __frozen_set(self, 'peer_pid', peer_pid)
    return __init__


def make_kata_mem_core_fields_Fields(D, F):
    def __init__(self, where, error=D[0], show=D[1]):
        __frozen_set(self, 'where', where)
        __frozen_set(self, 'error', error)
        __frozen_set(self, 'show', show)
    return __init__


def make_kata_mem_core_gosyntax_GoSyntaxError(D, F):
    def __init__(self, code, expr):
        __frozen_set(self, 'code', code)
        __frozen_set(self, 'expr', expr)
    return __init__


def make_kata_mem_core_guestmem_KernelParam(D, F):
    def __init__(self, name, value, given):
        __frozen_set(self, 'name', name)
        __frozen_set(self, 'value', value)
        __frozen_set(self, 'given', given)
    return __init__


def make_kata_mem_core_manifest_JsonNumber(D, F):
    def __init__(self, text):
        __frozen_set(self, 'text', text)
    return __init__


def make_kata_mem_core_model_BackendObject(D, F):
    def __init__(self, id, size):
        __frozen_set(self, 'id', id)
        __frozen_set(self, 'size', size)
    return __init__


def make_kata_mem_core_model_CgroupLevel(D, F):
    def __init__(self, path, limit, usage=D[0]):
        __frozen_set(self, 'path', path)
        __frozen_set(self, 'limit', limit)
        __frozen_set(self, 'usage', usage)
    return __init__


def make_kata_mem_core_model_Clamp(D, F):
    def __init__(self, cause, limit, detail):
        __frozen_set(self, 'cause', cause)
        __frozen_set(self, 'limit', limit)
        __frozen_set(self, 'detail', detail)
    return __init__


def make_kata_mem_core_model_Container(D, F):
    def __init__(self, name, memory_limit=D[0], hugepages_limit=D[1], cpu=D[2], role=D[3], state=D[4], origin=D[5], cpuset_cpus=D[6], hugepage_limits=D[7]):
        __frozen_set(self, 'name', name)
        __frozen_set(self, 'memory_limit', memory_limit)
        __frozen_set(self, 'hugepages_limit', hugepages_limit)
        __frozen_set(self, 'cpu', cpu)
        __frozen_set(self, 'role', role)
        __frozen_set(self, 'state', state)
        __frozen_set(self, 'origin', origin)
        __frozen_set(self, 'cpuset_cpus', cpuset_cpus)
        __frozen_set(self, 'hugepage_limits', hugepage_limits)
    return __init__


def make_kata_mem_core_model_Demand(D, F):
    def __init__(self, memory=D[0], hugepages=D[1], cpu=D[2], memory_from=D[3], hugepages_from=D[4], cpu_from=D[5], pod_origin=D[6]):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'hugepages', hugepages)
        __frozen_set(self, 'cpu', cpu)
        __frozen_set(self, 'memory_from', memory_from)
        __frozen_set(self, 'hugepages_from', hugepages_from)
        __frozen_set(self, 'cpu_from', cpu_from)
        __frozen_set(self, 'pod_origin', pod_origin)
    return __init__


def make_kata_mem_core_model_Guards(D, F):
    def __init__(self, cgroup=D[0], unseen=D[1], off=D[2], notes=D[3], node=D[4], pod_limit=D[5]):
        __frozen_set(self, 'cgroup', cgroup)
        __frozen_set(self, 'unseen', unseen)
        __frozen_set(self, 'off', off)
        __frozen_set(self, 'notes', notes)
        __frozen_set(self, 'node', node)
        __frozen_set(self, 'pod_limit', pod_limit)
    return __init__


def make_kata_mem_core_model_GuestCeiling(D, F):
    def __init__(self, policy, arch, total, kernel_memory, memmap_plugged, estimate, reading, available, headroom, room, addable, limit):
        __frozen_set(self, 'policy', policy)
        __frozen_set(self, 'arch', arch)
        __frozen_set(self, 'total', total)
        __frozen_set(self, 'kernel_memory', kernel_memory)
        __frozen_set(self, 'memmap_plugged', memmap_plugged)
        __frozen_set(self, 'estimate', estimate)
        __frozen_set(self, 'reading', reading)
        __frozen_set(self, 'available', available)
        __frozen_set(self, 'headroom', headroom)
        __frozen_set(self, 'room', room)
        __frozen_set(self, 'addable', addable)
        __frozen_set(self, 'limit', limit)
    return __init__


def make_kata_mem_core_model_GuestPolicy(D, F):
    def __init__(self, onlining, onlining_from, memmap_on_memory, memmap_from, movable_ratio=D[0]):
        __frozen_set(self, 'onlining', onlining)
        __frozen_set(self, 'onlining_from', onlining_from)
        __frozen_set(self, 'memmap_on_memory', memmap_on_memory)
        __frozen_set(self, 'memmap_from', memmap_from)
        __frozen_set(self, 'movable_ratio', movable_ratio)
    return __init__


def make_kata_mem_core_model_GuestUsage(D, F):
    def __init__(self, total=D[0], available=D[1], free=D[2], disk_caches=D[3], major_faults=D[4], last_update=D[5], observed_at=D[6], sequence=D[7]):
        __frozen_set(self, 'total', total)
        __frozen_set(self, 'available', available)
        __frozen_set(self, 'free', free)
        __frozen_set(self, 'disk_caches', disk_caches)
        __frozen_set(self, 'major_faults', major_faults)
        __frozen_set(self, 'last_update', last_update)
        __frozen_set(self, 'observed_at', observed_at)
        __frozen_set(self, 'sequence', sequence)
    return __init__


def make_kata_mem_core_model_HostCgroup(D, F):
    def __init__(self, path, version, usage, levels=D[0], origin=D[1], usage_after=D[2], unread_usage=D[3]):
        __frozen_set(self, 'path', path)
        __frozen_set(self, 'version', version)
        __frozen_set(self, 'usage', usage)
        __frozen_set(self, 'levels', levels)
        __frozen_set(self, 'origin', origin)
        __frozen_set(self, 'usage_after', usage_after)
        __frozen_set(self, 'unread_usage', unread_usage)
    return __init__


def make_kata_mem_core_model_HostFacts(D, F):
    def __init__(self, memory, cpus, arch, hugepage_size=D[0], hugepages_total=D[1], hugepages_free=D[2], cgroup_memory_limit=D[3], cgroup_path=D[4], sources=D[5]):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'cpus', cpus)
        __frozen_set(self, 'arch', arch)
        __frozen_set(self, 'hugepage_size', hugepage_size)
        __frozen_set(self, 'hugepages_total', hugepages_total)
        __frozen_set(self, 'hugepages_free', hugepages_free)
        __frozen_set(self, 'cgroup_memory_limit', cgroup_memory_limit)
        __frozen_set(self, 'cgroup_path', cgroup_path)
        __frozen_set(self, 'sources', sources)
    return __init__


def make_kata_mem_core_model_MemoryDevice(D, F):
    def __init__(self, id, kind, size, requested=D[0], max_size=D[1], block=D[2], slot=D[3], memdev=D[4], hotplugged=D[5], pending_unplug=D[6], ours=D[7], addr=D[8]):
        __frozen_set(self, 'id', id)
        __frozen_set(self, 'kind', kind)
        __frozen_set(self, 'size', size)
        __frozen_set(self, 'requested', requested)
        __frozen_set(self, 'max_size', max_size)
        __frozen_set(self, 'block', block)
        __frozen_set(self, 'slot', slot)
        __frozen_set(self, 'memdev', memdev)
        __frozen_set(self, 'hotplugged', hotplugged)
        __frozen_set(self, 'pending_unplug', pending_unplug)
        __frozen_set(self, 'ours', ours)
        __frozen_set(self, 'addr', addr)
    return __init__


def make_kata_mem_core_model_MemoryPlan(D, F):
    def __init__(self, host, configured_max, max, base, requested, aligned, target, current, mechanism, block, clamps, steps, sizing=D[0], pod_overhead=D[1], pod_overhead_origin=D[2], host_cgroup=D[3], host_cgroup_unseen=D[4], vmm_overhead=D[5], node=D[6], workload=__frozen_missing, guest=D[7], guest_policy=D[8], static_sizing=D[9], max_cause=D[10], max_raised=D[11], max_limit=D[12]):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'configured_max', configured_max)
        __frozen_set(self, 'max', max)
        __frozen_set(self, 'base', base)
        __frozen_set(self, 'requested', requested)
        __frozen_set(self, 'aligned', aligned)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'current', current)
        __frozen_set(self, 'mechanism', mechanism)
        __frozen_set(self, 'block', block)
        __frozen_set(self, 'clamps', clamps)
        __frozen_set(self, 'steps', steps)
        __frozen_set(self, 'sizing', sizing)
        __frozen_set(self, 'pod_overhead', pod_overhead)
        __frozen_set(self, 'pod_overhead_origin', pod_overhead_origin)
        __frozen_set(self, 'host_cgroup', host_cgroup)
        __frozen_set(self, 'host_cgroup_unseen', host_cgroup_unseen)
        __frozen_set(self, 'vmm_overhead', vmm_overhead)
        __frozen_set(self, 'node', node)
        __frozen_set(self, 'workload', F[0]() if workload is __frozen_missing else workload)
        __frozen_set(self, 'guest', guest)
        __frozen_set(self, 'guest_policy', guest_policy)
        __frozen_set(self, 'static_sizing', static_sizing)
        __frozen_set(self, 'max_cause', max_cause)
        __frozen_set(self, 'max_raised', max_raised)
        __frozen_set(self, 'max_limit', max_limit)
    return __init__


def make_kata_mem_core_model_NodeView(D, F):
    def __init__(self, host, reserved, budget, committed_others, available=D[0]):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'reserved', reserved)
        __frozen_set(self, 'budget', budget)
        __frozen_set(self, 'committed_others', committed_others)
        __frozen_set(self, 'available', available)
    return __init__


def make_kata_mem_core_model_Note(D, F):
    def __init__(self, code, text):
        __frozen_set(self, 'code', code)
        __frozen_set(self, 'text', text)
    return __init__


def make_kata_mem_core_model_Origin(D, F):
    def __init__(self, kind, where=D[0], key=D[1], value=D[2], note=D[3]):
        __frozen_set(self, 'kind', kind)
        __frozen_set(self, 'where', where)
        __frozen_set(self, 'key', key)
        __frozen_set(self, 'value', value)
        __frozen_set(self, 'note', note)
    return __init__


def make_kata_mem_core_model_Outcome(D, F):
    def __init__(self, status, reason, message, observed, target, steps=D[0], retry_after_s=D[1]):
        __frozen_set(self, 'status', status)
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'message', message)
        __frozen_set(self, 'observed', observed)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'steps', steps)
        __frozen_set(self, 'retry_after_s', retry_after_s)
    return __init__


def make_kata_mem_core_model_OwnedDevice(D, F):
    def __init__(self, id, memdev, size, kind=D[0], confirmed=D[1]):
        __frozen_set(self, 'id', id)
        __frozen_set(self, 'memdev', memdev)
        __frozen_set(self, 'size', size)
        __frozen_set(self, 'kind', kind)
        __frozen_set(self, 'confirmed', confirmed)
    return __init__


def make_kata_mem_core_model_Plan(D, F):
    def __init__(self, memory, vcpus, notes):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'vcpus', vcpus)
        __frozen_set(self, 'notes', notes)
    return __init__


def make_kata_mem_core_model_PodResources(D, F):
    def __init__(self, memory=D[0], cpu=D[1], hugepages=D[2], origin=D[3], hugepage_limits=D[4]):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'cpu', cpu)
        __frozen_set(self, 'hugepages', hugepages)
        __frozen_set(self, 'origin', origin)
        __frozen_set(self, 'hugepage_limits', hugepage_limits)
    return __init__


def make_kata_mem_core_model_SandboxSizing(D, F):
    def __init__(self, memory, cpu, origin=D[0], notes=D[1], source=D[2]):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'cpu', cpu)
        __frozen_set(self, 'origin', origin)
        __frozen_set(self, 'notes', notes)
        __frozen_set(self, 'source', source)
    return __init__


def make_kata_mem_core_model_Settings(D, F):
    def __init__(self, dimm_block=D[0], virtio_mem_block=D[1], headroom_min=D[2], headroom_percent=D[3], shrink_step_min=D[4], shrink_step_percent=D[5], step_timeout_s=D[6], usage_max_age_s=D[7], stats_interval_s=D[8], allow_shrink=D[9], state_dir=D[10], host_memory_cgroup=D[11], hugepages_path=D[12], sizing=D[13], pod_overhead=D[14], vmm_overhead=D[15], vmm_overhead_per_gib=D[16], host_cgroup_margin=D[17], host_cgroup_guard=D[18], node_reserved=D[19], node_overcommit=D[20], runtime=D[21], guest_onlining=D[22], guest_memmap_on_memory=D[23]):
        __frozen_set(self, 'dimm_block', dimm_block)
        __frozen_set(self, 'virtio_mem_block', virtio_mem_block)
        __frozen_set(self, 'headroom_min', headroom_min)
        __frozen_set(self, 'headroom_percent', headroom_percent)
        __frozen_set(self, 'shrink_step_min', shrink_step_min)
        __frozen_set(self, 'shrink_step_percent', shrink_step_percent)
        __frozen_set(self, 'step_timeout_s', step_timeout_s)
        __frozen_set(self, 'usage_max_age_s', usage_max_age_s)
        __frozen_set(self, 'stats_interval_s', stats_interval_s)
        __frozen_set(self, 'allow_shrink', allow_shrink)
        __frozen_set(self, 'state_dir', state_dir)
        __frozen_set(self, 'host_memory_cgroup', host_memory_cgroup)
        __frozen_set(self, 'hugepages_path', hugepages_path)
        __frozen_set(self, 'sizing', sizing)
        __frozen_set(self, 'pod_overhead', pod_overhead)
        __frozen_set(self, 'vmm_overhead', vmm_overhead)
        __frozen_set(self, 'vmm_overhead_per_gib', vmm_overhead_per_gib)
        __frozen_set(self, 'host_cgroup_margin', host_cgroup_margin)
        __frozen_set(self, 'host_cgroup_guard', host_cgroup_guard)
        __frozen_set(self, 'node_reserved', node_reserved)
        __frozen_set(self, 'node_overcommit', node_overcommit)
        __frozen_set(self, 'runtime', runtime)
        __frozen_set(self, 'guest_onlining', guest_onlining)
        __frozen_set(self, 'guest_memmap_on_memory', guest_memmap_on_memory)
    return __init__


def make_kata_mem_core_model_SizingConfig(D, F):
    def __init__(self, path, hypervisor, default_memory, default_maxmemory, memory_slots, memory_offset, enable_virtio_mem, enable_hugepages, static_sandbox_resource_mgmt, default_vcpus, default_maxvcpus, settings=__frozen_missing, enable_annotations=D[0], overhead_vcpus=D[1], overhead_memory=D[2], runtime=D[3], sources=D[4], files=D[5], kernel_params=D[6], shared_fs=D[7], file_mem_backend=D[8]):
        __frozen_set(self, 'path', path)
        __frozen_set(self, 'hypervisor', hypervisor)
        __frozen_set(self, 'default_memory', default_memory)
        __frozen_set(self, 'default_maxmemory', default_maxmemory)
        __frozen_set(self, 'memory_slots', memory_slots)
        __frozen_set(self, 'memory_offset', memory_offset)
        __frozen_set(self, 'enable_virtio_mem', enable_virtio_mem)
        __frozen_set(self, 'enable_hugepages', enable_hugepages)
        __frozen_set(self, 'static_sandbox_resource_mgmt', static_sandbox_resource_mgmt)
        __frozen_set(self, 'default_vcpus', default_vcpus)
        __frozen_set(self, 'default_maxvcpus', default_maxvcpus)
        __frozen_set(self, 'settings', F[0]() if settings is __frozen_missing else settings)
        __frozen_set(self, 'enable_annotations', enable_annotations)
        __frozen_set(self, 'overhead_vcpus', overhead_vcpus)
        __frozen_set(self, 'overhead_memory', overhead_memory)
        __frozen_set(self, 'runtime', runtime)
        __frozen_set(self, 'sources', sources)
        __frozen_set(self, 'files', files)
        __frozen_set(self, 'kernel_params', kernel_params)
        __frozen_set(self, 'shared_fs', shared_fs)
        __frozen_set(self, 'file_mem_backend', file_mem_backend)
    return __init__


def make_kata_mem_core_model_Step(D, F):
    def __init__(self, action, device, size, delta, total_after, memdev=D[0]):
        __frozen_set(self, 'action', action)
        __frozen_set(self, 'device', device)
        __frozen_set(self, 'size', size)
        __frozen_set(self, 'delta', delta)
        __frozen_set(self, 'total_after', total_after)
        __frozen_set(self, 'memdev', memdev)
    return __init__


def make_kata_mem_core_model_Unseen(D, F):
    def __init__(self, reason, detail):
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'detail', detail)
    return __init__


def make_kata_mem_core_model_VcpuPlan(D, F):
    def __init__(self, host, max, default, requested, target, clamps, added_to=D[0], base=D[1], containers=D[2], raised_from=D[3]):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'max', max)
        __frozen_set(self, 'default', default)
        __frozen_set(self, 'requested', requested)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'clamps', clamps)
        __frozen_set(self, 'added_to', added_to)
        __frozen_set(self, 'base', base)
        __frozen_set(self, 'containers', containers)
        __frozen_set(self, 'raised_from', raised_from)
    return __init__


def make_kata_mem_core_model_VmState(D, F):
    def __init__(self, base, devices=D[0], slots=D[1], device_space=D[2], loose=D[3], other_ids=D[4], backend_objects=D[5], orphans=D[6], unproven=D[7], vmm_pid=D[8], vmm_pid_hidden=D[9], vmm_hard_limit=D[10], other_regions=D[11]):
        __frozen_set(self, 'base', base)
        __frozen_set(self, 'devices', devices)
        __frozen_set(self, 'slots', slots)
        __frozen_set(self, 'device_space', device_space)
        __frozen_set(self, 'loose', loose)
        __frozen_set(self, 'other_ids', other_ids)
        __frozen_set(self, 'backend_objects', backend_objects)
        __frozen_set(self, 'orphans', orphans)
        __frozen_set(self, 'unproven', unproven)
        __frozen_set(self, 'vmm_pid', vmm_pid)
        __frozen_set(self, 'vmm_pid_hidden', vmm_pid_hidden)
        __frozen_set(self, 'vmm_hard_limit', vmm_hard_limit)
        __frozen_set(self, 'other_regions', other_regions)
    return __init__


def make_kata_mem_core_model_Workload(D, F):
    def __init__(self, containers=D[0], sizing=D[1], overhead=D[2], overhead_origin=D[3], pod=D[4], hypervisor=D[5], hypervisor_origin=D[6]):
        __frozen_set(self, 'containers', containers)
        __frozen_set(self, 'sizing', sizing)
        __frozen_set(self, 'overhead', overhead)
        __frozen_set(self, 'overhead_origin', overhead_origin)
        __frozen_set(self, 'pod', pod)
        __frozen_set(self, 'hypervisor', hypervisor)
        __frozen_set(self, 'hypervisor_origin', hypervisor_origin)
    return __init__


def make_kata_mem_core_outcomes_Stop(D, F):
    def __init__(self, status, reason, message):
        __frozen_set(self, 'status', status)
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'message', message)
    return __init__


def make_kata_mem_core_podresize_CriAnswer(D, F):
    def __init__(self, code, message):
        __frozen_set(self, 'code', code)
        __frozen_set(self, 'message', message)
    return __init__


def make_kata_mem_core_record_Deferral(D, F):
    def __init__(self, reason, attempts, retry_at, target=D[0]):
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'attempts', attempts)
        __frozen_set(self, 'retry_at', retry_at)
        __frozen_set(self, 'target', target)
    return __init__


def make_kata_mem_core_record_LastOutcome(D, F):
    def __init__(self, status, reason, message, at):
        __frozen_set(self, 'status', status)
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'message', message)
        __frozen_set(self, 'at', at)
    return __init__


def make_kata_mem_core_record_PendingGrow(D, F):
    def __init__(self, target, cgroup, limit):
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'cgroup', cgroup)
        __frozen_set(self, 'limit', limit)
    return __init__


def make_kata_mem_core_record_Record(D, F):
    def __init__(self, sandbox, state=D[0], step=D[1], phase=D[2], owned=D[3], pending_unplug=D[4], observed=D[5], target=D[6], deferred=D[7], last_outcome=D[8], updated_at=D[9], pending_grow=D[10], legacy=D[11]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'state', state)
        __frozen_set(self, 'step', step)
        __frozen_set(self, 'phase', phase)
        __frozen_set(self, 'owned', owned)
        __frozen_set(self, 'pending_unplug', pending_unplug)
        __frozen_set(self, 'observed', observed)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'deferred', deferred)
        __frozen_set(self, 'last_outcome', last_outcome)
        __frozen_set(self, 'updated_at', updated_at)
        __frozen_set(self, 'pending_grow', pending_grow)
        __frozen_set(self, 'legacy', legacy)
    return __init__


def make_kata_mem_core_reports_StepProgress(D, F):
    def __init__(self, state, detail=D[0]):
        __frozen_set(self, 'state', state)
        __frozen_set(self, 'detail', detail)
    return __init__


def make_kata_mem_core_request_CallOptions(D, F):
    def __init__(self, state_dir=D[0], force=D[1]):
        __frozen_set(self, 'state_dir', state_dir)
        __frozen_set(self, 'force', force)
    return __init__


def make_kata_mem_core_request_HostOverrides(D, F):
    def __init__(self, memory=D[0], cpus=D[1], arch=D[2], hugepages=D[3], cgroup=D[4], cgroup_origin=D[5]):
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'cpus', cpus)
        __frozen_set(self, 'arch', arch)
        __frozen_set(self, 'hugepages', hugepages)
        __frozen_set(self, 'cgroup', cgroup)
        __frozen_set(self, 'cgroup_origin', cgroup_origin)
    return __init__


def make_kata_mem_core_request_RequestHead(D, F):
    def __init__(self, sandbox, endpoint):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'endpoint', endpoint)
    return __init__


def make_kata_mem_core_request_SandboxRequest(D, F):
    def __init__(self, sandbox, event=D[0], config=D[1], workload=__frozen_missing, endpoint=D[2], mode=D[3], allow_shrink=D[4], host=__frozen_missing, resize=D[5]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'event', event)
        __frozen_set(self, 'config', config)
        __frozen_set(self, 'workload', F[0]() if workload is __frozen_missing else workload)
        __frozen_set(self, 'endpoint', endpoint)
        __frozen_set(self, 'mode', mode)
        __frozen_set(self, 'allow_shrink', allow_shrink)
        __frozen_set(self, 'host', F[1]() if host is __frozen_missing else host)
        __frozen_set(self, 'resize', resize)
        self.__post_init__()
    return __init__


def make_kata_mem_core_results_Applied(D, F):
    def __init__(self, sandbox, config, plan, outcome, notes=D[0]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'config', config)
        __frozen_set(self, 'plan', plan)
        __frozen_set(self, 'outcome', outcome)
        __frozen_set(self, 'notes', notes)
    return __init__


def make_kata_mem_core_results_Forgotten(D, F):
    def __init__(self, sandbox, config, notes=D[0]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'config', config)
        __frozen_set(self, 'notes', notes)
    return __init__


def make_kata_mem_core_results_NodeStatus(D, F):
    def __init__(self, host, reserved, budget, committed, sandboxes, skipped=D[0], state_dir=D[1], found=D[2], notes=D[3]):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'reserved', reserved)
        __frozen_set(self, 'budget', budget)
        __frozen_set(self, 'committed', committed)
        __frozen_set(self, 'sandboxes', sandboxes)
        __frozen_set(self, 'skipped', skipped)
        __frozen_set(self, 'state_dir', state_dir)
        __frozen_set(self, 'found', found)
        __frozen_set(self, 'notes', notes)
    return __init__


def make_kata_mem_core_results_Planned(D, F):
    def __init__(self, sandbox, config, plan):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'config', config)
        __frozen_set(self, 'plan', plan)
    return __init__


def make_kata_mem_core_results_SandboxSummary(D, F):
    def __init__(self, sandbox, backend, current, target, state, reason=D[0]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'backend', backend)
        __frozen_set(self, 'current', current)
        __frozen_set(self, 'target', target)
        __frozen_set(self, 'state', state)
        __frozen_set(self, 'reason', reason)
    return __init__


def make_kata_mem_core_results_Visit(D, F):
    def __init__(self, sandbox, action, detail, outcome=D[0], notes=D[1], exit_code=D[2], unseen=D[3]):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'action', action)
        __frozen_set(self, 'detail', detail)
        __frozen_set(self, 'outcome', outcome)
        __frozen_set(self, 'notes', notes)
        __frozen_set(self, 'exit_code', exit_code)
        __frozen_set(self, 'unseen', unseen)
    return __init__


def make_kata_mem_core_runtimeclass_PodFit(D, F):
    def __init__(self, limits, vm, asked, vmm_overhead, margin):
        __frozen_set(self, 'limits', limits)
        __frozen_set(self, 'vm', vm)
        __frozen_set(self, 'asked', asked)
        __frozen_set(self, 'vmm_overhead', vmm_overhead)
        __frozen_set(self, 'margin', margin)
    return __init__


def make_kata_mem_core_runtimeclass_RuntimeClassOverhead(D, F):
    def __init__(self, sizing, max_pod_memory, max_pod_memory_from, memory, binding, smallest, largest, mechanism, static, block, boot, maximum, vmm_fixed, vmm_per_gib, margin, default_vcpus, cpu_millis):
        __frozen_set(self, 'sizing', sizing)
        __frozen_set(self, 'max_pod_memory', max_pod_memory)
        __frozen_set(self, 'max_pod_memory_from', max_pod_memory_from)
        __frozen_set(self, 'memory', memory)
        __frozen_set(self, 'binding', binding)
        __frozen_set(self, 'smallest', smallest)
        __frozen_set(self, 'largest', largest)
        __frozen_set(self, 'mechanism', mechanism)
        __frozen_set(self, 'static', static)
        __frozen_set(self, 'block', block)
        __frozen_set(self, 'boot', boot)
        __frozen_set(self, 'maximum', maximum)
        __frozen_set(self, 'vmm_fixed', vmm_fixed)
        __frozen_set(self, 'vmm_per_gib', vmm_per_gib)
        __frozen_set(self, 'margin', margin)
        __frozen_set(self, 'default_vcpus', default_vcpus)
        __frozen_set(self, 'cpu_millis', cpu_millis)
    return __init__


def make_kata_mem_core_safety_Verdict(D, F):
    def __init__(self, action, reason, message):
        __frozen_set(self, 'action', action)
        __frozen_set(self, 'reason', reason)
        __frozen_set(self, 'message', message)
    return __init__


def make_kata_mem_core_sandbox_resources_SandboxResize(D, F):
    def __init__(self, resources, overhead=__frozen_missing):
        __frozen_set(self, 'resources', resources)
        __frozen_set(self, 'overhead', F[0]() if overhead is __frozen_missing else overhead)
    return __init__


def make_kata_mem_core_sandbox_resources_SandboxResources(D, F):
    def __init__(self, memory_limit=D[0], cpu_quota=D[1], cpu_period=D[2]):
        __frozen_set(self, 'memory_limit', memory_limit)
        __frozen_set(self, 'cpu_quota', cpu_quota)
        __frozen_set(self, 'cpu_period', cpu_period)
    return __init__


def make_kata_mem_edges_cgroups_Mount(D, F):
    def __init__(self, root, point, fstype, options):
        __frozen_set(self, 'root', root)
        __frozen_set(self, 'point', point)
        __frozen_set(self, 'fstype', fstype)
        __frozen_set(self, 'options', options)
    return __init__


def make_kata_mem_edges_pod__Read(D, F):
    def __init__(self, container, at, limits, requests):
        __frozen_set(self, 'container', container)
        __frozen_set(self, 'at', at)
        __frozen_set(self, 'limits', limits)
        __frozen_set(self, 'requests', requests)
    return __init__


def make_kata_mem_edges_service_record_ServiceRecord(D, F):
    def __init__(self, state_dir, config):
        __frozen_set(self, 'state_dir', state_dir)
        __frozen_set(self, 'config', config)
    return __init__


def make_kata_mem_edges_statedir_Listing(D, F):
    def __init__(self, sandboxes, refused, foreign):
        __frozen_set(self, 'sandboxes', sandboxes)
        __frozen_set(self, 'refused', refused)
        __frozen_set(self, 'foreign', foreign)
    return __init__


def make_kata_mem_interfaces_listener_MetricsAddress(D, F):
    def __init__(self, host, port):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'port', port)
    return __init__


def make_kata_mem_interfaces_listener_Peer(D, F):
    def __init__(self, pid, uid, gid):
        __frozen_set(self, 'pid', pid)
        __frozen_set(self, 'uid', uid)
        __frozen_set(self, 'gid', gid)
    return __init__


def make_kata_mem_interfaces_listener_Port(D, F):
    def __init__(self, name, checks_peer, routes):
        __frozen_set(self, 'name', name)
        __frozen_set(self, 'checks_peer', checks_peer)
        __frozen_set(self, 'routes', routes)
    return __init__


def make_kata_mem_interfaces_listener_Remote(D, F):
    def __init__(self, host, port):
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'port', port)
    return __init__


def make_kata_mem_interfaces_protocol_Answer(D, F):
    def __init__(self, response=D[0], error=D[1], cri=D[2]):
        __frozen_set(self, 'response', response)
        __frozen_set(self, 'error', error)
        __frozen_set(self, 'cri', cri)
    return __init__


def make_kata_mem_orchestration_connect_Opened(D, F):
    def __init__(self, backend, endpoint):
        __frozen_set(self, 'backend', backend)
        __frozen_set(self, 'endpoint', endpoint)
    return __init__


def make_kata_mem_orchestration_executor_Options(D, F):
    def __init__(self, allow_shrink=D[0], force=D[1], crash_at=D[2]):
        __frozen_set(self, 'allow_shrink', allow_shrink)
        __frozen_set(self, 'force', force)
        __frozen_set(self, 'crash_at', crash_at)
    return __init__


def make_kata_mem_orchestration_executor_Result(D, F):
    def __init__(self, plan, outcome, notes=D[0]):
        __frozen_set(self, 'plan', plan)
        __frozen_set(self, 'outcome', outcome)
        __frozen_set(self, 'notes', notes)
    return __init__


def make_kata_mem_orchestration_executor__GrowWatch(D, F):
    def __init__(self, before, start, arch):
        __frozen_set(self, 'before', before)
        __frozen_set(self, 'start', start)
        __frozen_set(self, 'arch', arch)
    return __init__


def make_kata_mem_orchestration_guards_HostSide(D, F):
    def __init__(self, cfg, host, given_cgroup=D[0], given_origin=D[1], pod_limit=D[2]):
        __frozen_set(self, 'cfg', cfg)
        __frozen_set(self, 'host', host)
        __frozen_set(self, 'given_cgroup', given_cgroup)
        __frozen_set(self, 'given_origin', given_origin)
        __frozen_set(self, 'pod_limit', pod_limit)
    return __init__


def make_kata_mem_orchestration_status_NoEndpoint(D, F):
    def __init__(self, sandbox, why, state_dir):
        __frozen_set(self, 'sandbox', sandbox)
        __frozen_set(self, 'why', why)
        __frozen_set(self, 'state_dir', state_dir)
    return __init__


def make_kata_mem_orchestration_status_SandboxStatus(D, F):
    def __init__(self, vm, usage, record):
        __frozen_set(self, 'vm', vm)
        __frozen_set(self, 'usage', usage)
        __frozen_set(self, 'record', record)
    return __init__


MAKERS: dict = {
    'kata_mem.core.backing.MemoryBackend': (((('kind', 'required'), ('mem_path', 'default'), ('share', 'default'), ('why', 'default')), False), make_kata_mem_core_backing_MemoryBackend),
    'kata_mem.core.endpoint.Endpoint': (((('kind', 'required'), ('target', 'required'), ('domain', 'default'), ('vmm', 'default'), ('saved', 'default')), True), make_kata_mem_core_endpoint_Endpoint),
    'kata_mem.core.endpoint.VmmIdentity': (((('device', 'required'), ('inode', 'required'), ('owner_uid', 'required'), ('peer_uid', 'required'), ('peer_pid', 'default')), False), make_kata_mem_core_endpoint_VmmIdentity),
    'kata_mem.core.fields.Fields': (((('where', 'required'), ('error', 'default'), ('show', 'default')), False), make_kata_mem_core_fields_Fields),
    'kata_mem.core.gosyntax.GoSyntaxError': (((('code', 'required'), ('expr', 'required')), False), make_kata_mem_core_gosyntax_GoSyntaxError),
    'kata_mem.core.guestmem.KernelParam': (((('name', 'required'), ('value', 'required'), ('given', 'required')), False), make_kata_mem_core_guestmem_KernelParam),
    'kata_mem.core.manifest.JsonNumber': (((('text', 'required'),), False), make_kata_mem_core_manifest_JsonNumber),
    'kata_mem.core.model.BackendObject': (((('id', 'required'), ('size', 'required')), False), make_kata_mem_core_model_BackendObject),
    'kata_mem.core.model.CgroupLevel': (((('path', 'required'), ('limit', 'required'), ('usage', 'default')), False), make_kata_mem_core_model_CgroupLevel),
    'kata_mem.core.model.Clamp': (((('cause', 'required'), ('limit', 'required'), ('detail', 'required')), False), make_kata_mem_core_model_Clamp),
    'kata_mem.core.model.Container': (((('name', 'required'), ('memory_limit', 'default'), ('hugepages_limit', 'default'), ('cpu', 'default'), ('role', 'default'), ('state', 'default'), ('origin', 'default'), ('cpuset_cpus', 'default'), ('hugepage_limits', 'default')), False), make_kata_mem_core_model_Container),
    'kata_mem.core.model.Demand': (((('memory', 'default'), ('hugepages', 'default'), ('cpu', 'default'), ('memory_from', 'default'), ('hugepages_from', 'default'), ('cpu_from', 'default'), ('pod_origin', 'default')), False), make_kata_mem_core_model_Demand),
    'kata_mem.core.model.Guards': (((('cgroup', 'default'), ('unseen', 'default'), ('off', 'default'), ('notes', 'default'), ('node', 'default'), ('pod_limit', 'default')), False), make_kata_mem_core_model_Guards),
    'kata_mem.core.model.GuestCeiling': (((('policy', 'required'), ('arch', 'required'), ('total', 'required'), ('kernel_memory', 'required'), ('memmap_plugged', 'required'), ('estimate', 'required'), ('reading', 'required'), ('available', 'required'), ('headroom', 'required'), ('room', 'required'), ('addable', 'required'), ('limit', 'required')), False), make_kata_mem_core_model_GuestCeiling),
    'kata_mem.core.model.GuestPolicy': (((('onlining', 'required'), ('onlining_from', 'required'), ('memmap_on_memory', 'required'), ('memmap_from', 'required'), ('movable_ratio', 'default')), False), make_kata_mem_core_model_GuestPolicy),
    'kata_mem.core.model.GuestUsage': (((('total', 'default'), ('available', 'default'), ('free', 'default'), ('disk_caches', 'default'), ('major_faults', 'default'), ('last_update', 'default'), ('observed_at', 'default'), ('sequence', 'default')), False), make_kata_mem_core_model_GuestUsage),
    'kata_mem.core.model.HostCgroup': (((('path', 'required'), ('version', 'required'), ('usage', 'required'), ('levels', 'default'), ('origin', 'default'), ('usage_after', 'default'), ('unread_usage', 'default')), False), make_kata_mem_core_model_HostCgroup),
    'kata_mem.core.model.HostFacts': (((('memory', 'required'), ('cpus', 'required'), ('arch', 'required'), ('hugepage_size', 'default'), ('hugepages_total', 'default'), ('hugepages_free', 'default'), ('cgroup_memory_limit', 'default'), ('cgroup_path', 'default'), ('sources', 'default')), False), make_kata_mem_core_model_HostFacts),
    'kata_mem.core.model.MemoryDevice': (((('id', 'required'), ('kind', 'required'), ('size', 'required'), ('requested', 'default'), ('max_size', 'default'), ('block', 'default'), ('slot', 'default'), ('memdev', 'default'), ('hotplugged', 'default'), ('pending_unplug', 'default'), ('ours', 'default'), ('addr', 'default')), False), make_kata_mem_core_model_MemoryDevice),
    'kata_mem.core.model.MemoryPlan': (((('host', 'required'), ('configured_max', 'required'), ('max', 'required'), ('base', 'required'), ('requested', 'required'), ('aligned', 'required'), ('target', 'required'), ('current', 'required'), ('mechanism', 'required'), ('block', 'required'), ('clamps', 'required'), ('steps', 'required'), ('sizing', 'default'), ('pod_overhead', 'default'), ('pod_overhead_origin', 'default'), ('host_cgroup', 'default'), ('host_cgroup_unseen', 'default'), ('vmm_overhead', 'default'), ('node', 'default'), ('workload', 'factory'), ('guest', 'default'), ('guest_policy', 'default'), ('static_sizing', 'default'), ('max_cause', 'default'), ('max_raised', 'default'), ('max_limit', 'default')), False), make_kata_mem_core_model_MemoryPlan),
    'kata_mem.core.model.NodeView': (((('host', 'required'), ('reserved', 'required'), ('budget', 'required'), ('committed_others', 'required'), ('available', 'default')), False), make_kata_mem_core_model_NodeView),
    'kata_mem.core.model.Note': (((('code', 'required'), ('text', 'required')), False), make_kata_mem_core_model_Note),
    'kata_mem.core.model.Origin': (((('kind', 'required'), ('where', 'default'), ('key', 'default'), ('value', 'default'), ('note', 'default')), False), make_kata_mem_core_model_Origin),
    'kata_mem.core.model.Outcome': (((('status', 'required'), ('reason', 'required'), ('message', 'required'), ('observed', 'required'), ('target', 'required'), ('steps', 'default'), ('retry_after_s', 'default')), False), make_kata_mem_core_model_Outcome),
    'kata_mem.core.model.OwnedDevice': (((('id', 'required'), ('memdev', 'required'), ('size', 'required'), ('kind', 'default'), ('confirmed', 'default')), False), make_kata_mem_core_model_OwnedDevice),
    'kata_mem.core.model.Plan': (((('memory', 'required'), ('vcpus', 'required'), ('notes', 'required')), False), make_kata_mem_core_model_Plan),
    'kata_mem.core.model.PodResources': (((('memory', 'default'), ('cpu', 'default'), ('hugepages', 'default'), ('origin', 'default'), ('hugepage_limits', 'default')), False), make_kata_mem_core_model_PodResources),
    'kata_mem.core.model.SandboxSizing': (((('memory', 'required'), ('cpu', 'required'), ('origin', 'default'), ('notes', 'default'), ('source', 'default')), False), make_kata_mem_core_model_SandboxSizing),
    'kata_mem.core.model.Settings': (((('dimm_block', 'default'), ('virtio_mem_block', 'default'), ('headroom_min', 'default'), ('headroom_percent', 'default'), ('shrink_step_min', 'default'), ('shrink_step_percent', 'default'), ('step_timeout_s', 'default'), ('usage_max_age_s', 'default'), ('stats_interval_s', 'default'), ('allow_shrink', 'default'), ('state_dir', 'default'), ('host_memory_cgroup', 'default'), ('hugepages_path', 'default'), ('sizing', 'default'), ('pod_overhead', 'default'), ('vmm_overhead', 'default'), ('vmm_overhead_per_gib', 'default'), ('host_cgroup_margin', 'default'), ('host_cgroup_guard', 'default'), ('node_reserved', 'default'), ('node_overcommit', 'default'), ('runtime', 'default'), ('guest_onlining', 'default'), ('guest_memmap_on_memory', 'default')), False), make_kata_mem_core_model_Settings),
    'kata_mem.core.model.SizingConfig': (((('path', 'required'), ('hypervisor', 'required'), ('default_memory', 'required'), ('default_maxmemory', 'required'), ('memory_slots', 'required'), ('memory_offset', 'required'), ('enable_virtio_mem', 'required'), ('enable_hugepages', 'required'), ('static_sandbox_resource_mgmt', 'required'), ('default_vcpus', 'required'), ('default_maxvcpus', 'required'), ('settings', 'factory'), ('enable_annotations', 'default'), ('overhead_vcpus', 'default'), ('overhead_memory', 'default'), ('runtime', 'default'), ('sources', 'default'), ('files', 'default'), ('kernel_params', 'default'), ('shared_fs', 'default'), ('file_mem_backend', 'default')), False), make_kata_mem_core_model_SizingConfig),
    'kata_mem.core.model.Step': (((('action', 'required'), ('device', 'required'), ('size', 'required'), ('delta', 'required'), ('total_after', 'required'), ('memdev', 'default')), False), make_kata_mem_core_model_Step),
    'kata_mem.core.model.Unseen': (((('reason', 'required'), ('detail', 'required')), False), make_kata_mem_core_model_Unseen),
    'kata_mem.core.model.VcpuPlan': (((('host', 'required'), ('max', 'required'), ('default', 'required'), ('requested', 'required'), ('target', 'required'), ('clamps', 'required'), ('added_to', 'default'), ('base', 'default'), ('containers', 'default'), ('raised_from', 'default')), False), make_kata_mem_core_model_VcpuPlan),
    'kata_mem.core.model.VmState': (((('base', 'required'), ('devices', 'default'), ('slots', 'default'), ('device_space', 'default'), ('loose', 'default'), ('other_ids', 'default'), ('backend_objects', 'default'), ('orphans', 'default'), ('unproven', 'default'), ('vmm_pid', 'default'), ('vmm_pid_hidden', 'default'), ('vmm_hard_limit', 'default'), ('other_regions', 'default')), False), make_kata_mem_core_model_VmState),
    'kata_mem.core.model.Workload': (((('containers', 'default'), ('sizing', 'default'), ('overhead', 'default'), ('overhead_origin', 'default'), ('pod', 'default'), ('hypervisor', 'default'), ('hypervisor_origin', 'default')), False), make_kata_mem_core_model_Workload),
    'kata_mem.core.outcomes.Stop': (((('status', 'required'), ('reason', 'required'), ('message', 'required')), False), make_kata_mem_core_outcomes_Stop),
    'kata_mem.core.podresize.CriAnswer': (((('code', 'required'), ('message', 'required')), False), make_kata_mem_core_podresize_CriAnswer),
    'kata_mem.core.record.Deferral': (((('reason', 'required'), ('attempts', 'required'), ('retry_at', 'required'), ('target', 'default')), False), make_kata_mem_core_record_Deferral),
    'kata_mem.core.record.LastOutcome': (((('status', 'required'), ('reason', 'required'), ('message', 'required'), ('at', 'required')), False), make_kata_mem_core_record_LastOutcome),
    'kata_mem.core.record.PendingGrow': (((('target', 'required'), ('cgroup', 'required'), ('limit', 'required')), False), make_kata_mem_core_record_PendingGrow),
    'kata_mem.core.record.Record': (((('sandbox', 'required'), ('state', 'default'), ('step', 'default'), ('phase', 'default'), ('owned', 'default'), ('pending_unplug', 'default'), ('observed', 'default'), ('target', 'default'), ('deferred', 'default'), ('last_outcome', 'default'), ('updated_at', 'default'), ('pending_grow', 'default'), ('legacy', 'default')), False), make_kata_mem_core_record_Record),
    'kata_mem.core.reports.StepProgress': (((('state', 'required'), ('detail', 'default')), False), make_kata_mem_core_reports_StepProgress),
    'kata_mem.core.request.CallOptions': (((('state_dir', 'default'), ('force', 'default')), False), make_kata_mem_core_request_CallOptions),
    'kata_mem.core.request.HostOverrides': (((('memory', 'default'), ('cpus', 'default'), ('arch', 'default'), ('hugepages', 'default'), ('cgroup', 'default'), ('cgroup_origin', 'default')), False), make_kata_mem_core_request_HostOverrides),
    'kata_mem.core.request.RequestHead': (((('sandbox', 'required'), ('endpoint', 'required')), False), make_kata_mem_core_request_RequestHead),
    'kata_mem.core.request.SandboxRequest': (((('sandbox', 'required'), ('event', 'default'), ('config', 'default'), ('workload', 'factory'), ('endpoint', 'default'), ('mode', 'default'), ('allow_shrink', 'default'), ('host', 'factory'), ('resize', 'default')), True), make_kata_mem_core_request_SandboxRequest),
    'kata_mem.core.results.Applied': (((('sandbox', 'required'), ('config', 'required'), ('plan', 'required'), ('outcome', 'required'), ('notes', 'default')), False), make_kata_mem_core_results_Applied),
    'kata_mem.core.results.Forgotten': (((('sandbox', 'required'), ('config', 'required'), ('notes', 'default')), False), make_kata_mem_core_results_Forgotten),
    'kata_mem.core.results.NodeStatus': (((('host', 'required'), ('reserved', 'required'), ('budget', 'required'), ('committed', 'required'), ('sandboxes', 'required'), ('skipped', 'default'), ('state_dir', 'default'), ('found', 'default'), ('notes', 'default')), False), make_kata_mem_core_results_NodeStatus),
    'kata_mem.core.results.Planned': (((('sandbox', 'required'), ('config', 'required'), ('plan', 'required')), False), make_kata_mem_core_results_Planned),
    'kata_mem.core.results.SandboxSummary': (((('sandbox', 'required'), ('backend', 'required'), ('current', 'required'), ('target', 'required'), ('state', 'required'), ('reason', 'default')), False), make_kata_mem_core_results_SandboxSummary),
    'kata_mem.core.results.Visit': (((('sandbox', 'required'), ('action', 'required'), ('detail', 'required'), ('outcome', 'default'), ('notes', 'default'), ('exit_code', 'default'), ('unseen', 'default')), False), make_kata_mem_core_results_Visit),
    'kata_mem.core.runtimeclass.PodFit': (((('limits', 'required'), ('vm', 'required'), ('asked', 'required'), ('vmm_overhead', 'required'), ('margin', 'required')), False), make_kata_mem_core_runtimeclass_PodFit),
    'kata_mem.core.runtimeclass.RuntimeClassOverhead': (((('sizing', 'required'), ('max_pod_memory', 'required'), ('max_pod_memory_from', 'required'), ('memory', 'required'), ('binding', 'required'), ('smallest', 'required'), ('largest', 'required'), ('mechanism', 'required'), ('static', 'required'), ('block', 'required'), ('boot', 'required'), ('maximum', 'required'), ('vmm_fixed', 'required'), ('vmm_per_gib', 'required'), ('margin', 'required'), ('default_vcpus', 'required'), ('cpu_millis', 'required')), False), make_kata_mem_core_runtimeclass_RuntimeClassOverhead),
    'kata_mem.core.safety.Verdict': (((('action', 'required'), ('reason', 'required'), ('message', 'required')), False), make_kata_mem_core_safety_Verdict),
    'kata_mem.core.sandbox_resources.SandboxResize': (((('resources', 'required'), ('overhead', 'factory')), False), make_kata_mem_core_sandbox_resources_SandboxResize),
    'kata_mem.core.sandbox_resources.SandboxResources': (((('memory_limit', 'default'), ('cpu_quota', 'default'), ('cpu_period', 'default')), False), make_kata_mem_core_sandbox_resources_SandboxResources),
    'kata_mem.edges.cgroups.Mount': (((('root', 'required'), ('point', 'required'), ('fstype', 'required'), ('options', 'required')), False), make_kata_mem_edges_cgroups_Mount),
    'kata_mem.edges.pod._Read': (((('container', 'required'), ('at', 'required'), ('limits', 'required'), ('requests', 'required')), False), make_kata_mem_edges_pod__Read),
    'kata_mem.edges.service_record.ServiceRecord': (((('state_dir', 'required'), ('config', 'required')), False), make_kata_mem_edges_service_record_ServiceRecord),
    'kata_mem.edges.statedir.Listing': (((('sandboxes', 'required'), ('refused', 'required'), ('foreign', 'required')), False), make_kata_mem_edges_statedir_Listing),
    'kata_mem.interfaces.listener.MetricsAddress': (((('host', 'required'), ('port', 'required')), False), make_kata_mem_interfaces_listener_MetricsAddress),
    'kata_mem.interfaces.listener.Peer': (((('pid', 'required'), ('uid', 'required'), ('gid', 'required')), False), make_kata_mem_interfaces_listener_Peer),
    'kata_mem.interfaces.listener.Port': (((('name', 'required'), ('checks_peer', 'required'), ('routes', 'required')), False), make_kata_mem_interfaces_listener_Port),
    'kata_mem.interfaces.listener.Remote': (((('host', 'required'), ('port', 'required')), False), make_kata_mem_interfaces_listener_Remote),
    'kata_mem.interfaces.protocol.Answer': (((('response', 'default'), ('error', 'default'), ('cri', 'default')), False), make_kata_mem_interfaces_protocol_Answer),
    'kata_mem.orchestration.connect.Opened': (((('backend', 'required'), ('endpoint', 'required')), False), make_kata_mem_orchestration_connect_Opened),
    'kata_mem.orchestration.executor.Options': (((('allow_shrink', 'default'), ('force', 'default'), ('crash_at', 'default')), False), make_kata_mem_orchestration_executor_Options),
    'kata_mem.orchestration.executor.Result': (((('plan', 'required'), ('outcome', 'required'), ('notes', 'default')), False), make_kata_mem_orchestration_executor_Result),
    'kata_mem.orchestration.executor._GrowWatch': (((('before', 'required'), ('start', 'required'), ('arch', 'required')), False), make_kata_mem_orchestration_executor__GrowWatch),
    'kata_mem.orchestration.guards.HostSide': (((('cfg', 'required'), ('host', 'required'), ('given_cgroup', 'default'), ('given_origin', 'default'), ('pod_limit', 'default')), False), make_kata_mem_orchestration_guards_HostSide),
    'kata_mem.orchestration.status.NoEndpoint': (((('sandbox', 'required'), ('why', 'required'), ('state_dir', 'required')), False), make_kata_mem_orchestration_status_NoEndpoint),
    'kata_mem.orchestration.status.SandboxStatus': (((('vm', 'required'), ('usage', 'required'), ('record', 'required')), False), make_kata_mem_orchestration_status_SandboxStatus),
}
