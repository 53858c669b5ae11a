package main

import (
	"context"
	"flag"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// imageStatus asks ImageStatus until the image is known or -wait passes: the CRI image
// store learns of a `ctr images import` asynchronously, after ctr has returned.
func imageStatus(client runtimeapi.ImageServiceClient, timeout time.Duration, args []string) {
	fs := flag.NewFlagSet("image-status", flag.ContinueOnError)
	image := fs.String("image", "", "image reference")
	wait := fs.Duration("wait", 0, "ask again (every 50 ms) until the image is known or this passes")
	if err := fs.Parse(args); err != nil {
		usageError("image-status: %v", err)
	}
	if *image == "" || fs.NArg() != 0 {
		usageError("image-status needs -image, and nothing else")
	}
	start := time.Now()
	deadline := start.Add(*wait)
	r := result{RPC: "ImageStatus"}
	for {
		r.Polls++
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := client.ImageStatus(ctx, &runtimeapi.ImageStatusRequest{
			Image: &runtimeapi.ImageSpec{Image: *image},
		})
		cancel()
		found := err == nil && resp.GetImage() != nil
		if found || err != nil || !time.Now().Before(deadline) {
			r.Found = &found
			if found {
				r.ImageID = resp.GetImage().GetId()
				r.RepoTags = resp.GetImage().GetRepoTags()
			}
			finish(r, err, start)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
