//go:build kube1.35

package main

import "k8s.io/kubernetes/pkg/apis/core"

// defaultPodLevel: at 1.35 PrepareForCreate defaults nothing of a Pod's resources; the
// pod-level defaulting is all in pkg/apis/core/v1/defaults.go SetDefaults_Pod
// (defaultHugePagePodLimits, defaultPodRequests), which SetObjectDefaults_Pod runs.
func defaultPodLevel(*core.Pod) {}
