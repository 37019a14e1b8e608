// The client of `npm run bench:kubelet-shim` with profile `client: go`: the kubelet's own CRI client
// (k8s.io/cri-client remote runtime service, what kubelet.go connects to containerRuntimeEndpoint
// with: RuntimeRequestTimeout 2 min, a no-op tracer provider as when tracing is off), one per path
// (containerd directly, each shim), making the bench's calls in a Go process of its own, as the
// kubelet is.
//
// Built by experiments/bench/kubelet-shim.ts (binaries.ts buildGoTool) inside the module that builds the
// Kubernetes binaries (experiments/testbed/build-binaries.sh): the same release as the testbed's
// kubelet.
//
//	kubelet-shim-client-go NAME=unix:///path.sock [NAME=...]
//
// Protocol, one JSON object per line: stdin {"method":"Version"|"ListPodSandbox"|"PodSandboxStatus",
// "count":n,"sandbox":"id","timed":bool}: count calls per path, interleaved in rotating order (call
// i goes to the paths starting at path i mod P, so that drifts hit every path alike); stdout {} for
// an untimed (warm-up) request, {"samples":{"NAME":[ms,...]}} for a timed one, {"error":"..."} on a
// failed call.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
)

type request struct {
	Method  string `json:"method"`
	Count   int    `json:"count"`
	Sandbox string `json:"sandbox"`
	Timed   bool   `json:"timed"`
}

type reply struct {
	Samples map[string][]float64 `json:"samples,omitempty"`
	Error   string               `json:"error,omitempty"`
}

type path struct {
	name    string
	runtime internalapi.RuntimeService
}

func call(ctx context.Context, rs internalapi.RuntimeService, req *request) error {
	switch req.Method {
	case "Version":
		_, err := rs.Version(ctx, "v1")
		return err
	case "ListPodSandbox":
		_, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
		return err
	case "PodSandboxStatus":
		_, err := rs.PodSandboxStatus(ctx, req.Sandbox, false)
		return err
	}
	return fmt.Errorf("unknown method %q", req.Method)
}

func main() {
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	var paths []path
	for _, arg := range os.Args[1:] {
		name, endpoint, ok := strings.Cut(arg, "=")
		if !ok {
			_ = out.Encode(reply{Error: fmt.Sprintf("argument %q: expected NAME=unix:///path", arg)})
			os.Exit(2)
		}
		rs, err := remote.NewRemoteRuntimeService(ctx, endpoint, 2*time.Minute, noop.NewTracerProvider(), false)
		if err != nil {
			_ = out.Encode(reply{Error: fmt.Sprintf("%s (%s): %v", name, endpoint, err)})
			os.Exit(1)
		}
		paths = append(paths, path{name, rs})
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(reply{Error: "bad request line: " + err.Error()})
			continue
		}
		samples := map[string][]float64{}
		var failed error
		for i := 0; i < req.Count && failed == nil; i++ {
			for k := range paths {
				p := paths[(i+k)%len(paths)]
				t0 := time.Now()
				if err := call(ctx, p.runtime, &req); err != nil {
					failed = fmt.Errorf("%s %s: %w", p.name, req.Method, err)
					break
				}
				if req.Timed {
					samples[p.name] = append(samples[p.name], float64(time.Since(t0).Nanoseconds())/1e6)
				}
			}
		}
		switch {
		case failed != nil:
			_ = out.Encode(reply{Error: failed.Error()})
		case req.Timed:
			_ = out.Encode(reply{Samples: samples})
		default:
			_ = out.Encode(reply{})
		}
	}
}
