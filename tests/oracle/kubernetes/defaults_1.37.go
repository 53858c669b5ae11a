//go:build !kube1.35

package main

import (
	podutil "k8s.io/kubernetes/pkg/api/pod"
	"k8s.io/kubernetes/pkg/apis/core"
)

// defaultPodLevel is what pkg/registry/core/pod/strategy.go podStrategy.PrepareForCreate
// defaults of a Pod's resources at 1.37: with PodLevelResourcesFixDefaulting (beta, on)
// the pod-level defaulting moved there from SetDefaults_Pod
// (pkg/api/pod/util.go DefaultPodLevelResources: hugepage limits, requests, then limits).
func defaultPodLevel(p *core.Pod) {
	podutil.DefaultPodLevelResources(p)
}
