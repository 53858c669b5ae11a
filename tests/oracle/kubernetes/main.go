// Command kubernetes-oracle answers, for the differential tests of kata-mem's Kubernetes
// rules (tests/oracle/test_kubernetes_oracle.py), what Kubernetes' own code says of a
// quantity or a Pod manifest, at the release this module pins: go.mod pins 1.37,
// kubernetes-1.35.mod the same program at 1.35 (built with -modfile and the tag
// kube1.35: scripts/build-oracles.sh). It reads one JSON case a line on stdin and writes
// one JSON answer a line on stdout, in order, until stdin ends: one process serves a test run.
//
//	{"op": "ParseQuantity", "text": "1.5Gi"}
//	{"op": "UnmarshalQuantity", "json": "\" 1.5Gi\""}   (a manifest's JSON value)
//	    -> {"ok": true, "quantity": {"dec": "1610612736", "value": "1610612736",
//	        "milli": "1610612736000", "string": "1536Mi"}} or {"ok": false, "err": "..."}
//	{"op": "Pod", "manifest": "<YAML or JSON of one Pod>"}
//	    -> {"ok": true, "pod": {...}}: what the API server makes of it (below)
//	{"op": "version"} -> {"ok": true, "value": "k8s.io/kubernetes v1.37.2"}
//
// Quantities travel as their exact decimal value (inf.Dec's String) and their
// canonical text; int64s as decimal strings.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/core"
	corev1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/core/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

type request struct {
	Op       string `json:"op"`
	Text     string `json:"text"`
	JSON     string `json:"json"`
	Manifest string `json:"manifest"`
}

type quantity struct {
	Dec    string `json:"dec"`
	Value  string `json:"value"`
	Milli  string `json:"milli"`
	String string `json:"string"`
}

type fieldError struct {
	Field  string `json:"field"`
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

// pod is what the API server makes of a Pod manifest, and what the kubelet reads of it.
type pod struct {
	// DecodeError: the manifest does not decode into a v1.Pod (strictly, as kubectl's
	// default field validation asks the API server to decode it).
	DecodeError string `json:"decode_error,omitempty"`
	// Errors: ValidatePodCreate on the defaulted Pod; none: the API server stores it.
	Errors []fieldError `json:"errors"`
	// The pod-level resources after defaulting (spec.resources), by resource name.
	PodLimits   map[string]string `json:"pod_limits"`
	PodRequests map[string]string `json:"pod_requests"`
	// component-helpers resource: PodLimits and PodRequests (what the kubelet sizes the
	// pod cgroup from), and AggregateContainerLimits/Requests (the containers alone).
	Limits            map[string]string `json:"limits"`
	Requests          map[string]string `json:"requests"`
	ContainerLimits   map[string]string `json:"container_limits"`
	ContainerRequests map[string]string `json:"container_requests"`
}

type answer struct {
	Ok       bool      `json:"ok"`
	Err      string    `json:"err,omitempty"`
	Value    string    `json:"value,omitempty"`
	Quantity *quantity `json:"quantity,omitempty"`
	Pod      *pod      `json:"pod,omitempty"`
}

func describe(q resource.Quantity) *quantity {
	return &quantity{
		Dec:    q.AsDec().String(),
		Value:  fmt.Sprint(q.Value()),
		Milli:  fmt.Sprint(q.MilliValue()),
		String: q.String(),
	}
}

func list(l v1.ResourceList) map[string]string {
	out := make(map[string]string, len(l))
	for name, q := range l {
		out[string(name)] = q.AsDec().String()
	}
	return out
}

func coreList(l core.ResourceList) map[string]string {
	out := make(map[string]string, len(l))
	for name, q := range l {
		out[string(name)] = q.AsDec().String()
	}
	return out
}

// decodePod decodes a manifest as kubectl sends it and the API server reads it: YAML
// becomes JSON (sigs.k8s.io/yaml, refusing a key given twice), and the JSON is decoded
// case-sensitively and strictly (sigs.k8s.io/json, as apimachinery's json serializer does
// with strict field validation: a duplicate or unknown field is an error).
func decodePod(text string) (*v1.Pod, error) {
	data := []byte(text)
	if t := strings.TrimLeft(text, " \t\r\n"); !strings.HasPrefix(t, "{") {
		var err error
		if data, err = yaml.YAMLToJSONStrict(data); err != nil {
			return nil, err
		}
	}
	var p v1.Pod
	strict, err := kjson.UnmarshalStrict(data, &p, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, strict[0]
	}
	return &p, nil
}

func decidePod(text string) *pod {
	external, err := decodePod(text)
	if err != nil {
		return &pod{DecodeError: err.Error()}
	}
	// The API server defaults the external version as it decodes it
	// (pkg/apis/core/v1/defaults.go SetDefaults_Pod and the rest), converts it, and then
	// the registry's PrepareForCreate may default more (defaultPodLevel, per release).
	corev1.SetObjectDefaults_Pod(external)
	var internal core.Pod
	if err := corev1.Convert_v1_Pod_To_core_Pod(external, &internal, nil); err != nil {
		return &pod{DecodeError: "conversion: " + err.Error()}
	}
	if internal.Namespace == "" {
		// The API server takes it from the request's path (pkg/registry/rest.BeforeCreate).
		internal.Namespace = "default"
	}
	defaultPodLevel(&internal)
	// pkg/registry/core/pod/strategy.go podStrategy.Validate.
	opts := podutil.GetValidationOptionsFromPodSpecAndMeta(&internal.Spec, nil, &internal.ObjectMeta, nil)
	opts.ResourceIsPod = true
	out := &pod{Errors: []fieldError{}}
	for _, e := range validation.ValidatePodCreate(&internal, opts) {
		out.Errors = append(out.Errors, fieldError{e.Field, string(e.Type), e.Detail})
	}
	sort.Slice(out.Errors, func(i, j int) bool { return out.Errors[i].Field < out.Errors[j].Field })
	if internal.Spec.Resources != nil {
		out.PodLimits = coreList(internal.Spec.Resources.Limits)
		out.PodRequests = coreList(internal.Spec.Resources.Requests)
	}
	var stored v1.Pod
	if err := corev1.Convert_core_Pod_To_v1_Pod(&internal, &stored, nil); err != nil {
		return &pod{DecodeError: "conversion back: " + err.Error()}
	}
	out.Limits = list(resourcehelper.PodLimits(&stored, resourcehelper.PodResourcesOptions{}))
	out.Requests = list(resourcehelper.PodRequests(&stored, resourcehelper.PodResourcesOptions{}))
	containers := resourcehelper.PodResourcesOptions{SkipPodLevelResources: true}
	out.ContainerLimits = list(resourcehelper.AggregateContainerLimits(&stored, containers))
	out.ContainerRequests = list(resourcehelper.AggregateContainerRequests(&stored, containers))
	return out
}

func kubernetesVersion() string {
	info, ok := debug.ReadBuildInfo()
	if ok {
		for _, dep := range info.Deps {
			if dep.Path == "k8s.io/kubernetes" {
				return dep.Path + " " + dep.Version
			}
		}
	}
	return "unknown"
}

func decide(r request) answer {
	switch r.Op {
	case "ParseQuantity":
		q, err := resource.ParseQuantity(r.Text)
		if err != nil {
			return answer{Err: err.Error()}
		}
		return answer{Ok: true, Quantity: describe(q)}
	case "UnmarshalQuantity":
		var q resource.Quantity
		if err := q.UnmarshalJSON([]byte(r.JSON)); err != nil {
			return answer{Err: err.Error()}
		}
		return answer{Ok: true, Quantity: describe(q)}
	case "Pod":
		return answer{Ok: true, Pod: decidePod(r.Manifest)}
	case "version":
		return answer{Ok: true, Value: kubernetesVersion()}
	}
	return answer{Err: fmt.Sprintf("unknown op %q", r.Op)}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "kubernetes-oracle: bad case %q: %v\n", in.Text(), err)
			os.Exit(2)
		}
		if err := enc.Encode(decide(r)); err != nil {
			fmt.Fprintf(os.Stderr, "kubernetes-oracle: %v\n", err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kubernetes-oracle: %v\n", err)
		os.Exit(1)
	}
}
