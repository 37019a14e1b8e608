// The scheduler's side of `npm run bench:extender` with profile `client: go`: kube-scheduler's own extender
// client (k8s.io/kubernetes/pkg/scheduler HTTPExtender, the code kube-scheduler runs for every
// configured extender) making one scheduling round per request: Filter with every node, then
// Prioritize with the nodes that passed, nodeCacheCapable (node names only on the wire), timed here.
//
// Built by experiments/bench/extender-client.ts (buildGoClient) inside the module that builds the Kubernetes binaries
// (experiments/testbed/build-binaries.sh), so it is the same k8s.io/kubernetes release as the
// testbed's kube-scheduler. A process of its own, as kube-scheduler is: its JSON and HTTP work,
// goroutines and garbage are not the extender's.
//
// Protocol, one JSON object per line: stdin {"names":[...]} (the node list, once) or
// {"url":"http://...","pod":{...v1.Pod}}; stdout {"startMs":..,"endMs":..,"feasible":n,
// "clientPreempted":n} or {"error":"..."}. startMs is Unix-epoch milliseconds, endMs startMs plus
// the round's monotonic duration; clientPreempted the process's involuntary context switches
// during the round (all its threads, /proc/self/task/*/status, read outside the timed part).
//
// -gc-between-rounds: the collector off during rounds, a full collection after each round's reply
// (outside the timed part). Measured 2026-11-26 (GODEBUG=gctrace=1, 100 nodes, alone on CPU 1 with
// the extender): with GOMAXPROCS 1 this client ran a 2-6 ms GC cycle every ~25 rounds, taking
// ~1.8 ms of its CPU from any round it overlapped; kube-scheduler with CPUs of its own runs those
// cycles on another P.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type request struct {
	Names *[]string `json:"names"`
	URL   string    `json:"url"`
	Pod   *v1.Pod   `json:"pod"`
}

type reply struct {
	StartMs         float64 `json:"startMs"`
	EndMs           float64 `json:"endMs"`
	Feasible        int     `json:"feasible"`
	ClientPreempted int64   `json:"clientPreempted"`
	Error           string  `json:"error,omitempty"`
}

var nonvoluntary = regexp.MustCompile(`nonvoluntary_ctxt_switches:\s+(\d+)`)

// preemptions: involuntary context switches of every thread of this process so far (0 off Linux).
func preemptions() int64 {
	files, _ := filepath.Glob("/proc/self/task/*/status")
	var n int64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := nonvoluntary.FindSubmatch(b); m != nil {
			v, _ := strconv.ParseInt(string(m[1]), 10, 64)
			n += v
		}
	}
	return n
}

func main() {
	gcBetweenRounds := flag.Bool("gc-between-rounds", false, "collect garbage after each round's reply, never during a round")
	flag.Parse()
	if *gcBetweenRounds {
		debug.SetGCPercent(-1)
	}
	extenders := map[string]fwk.Extender{}
	var nodes []fwk.NodeInfo
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(reply{Error: "bad request line: " + err.Error()})
			continue
		}
		if req.Names != nil {
			nodes = make([]fwk.NodeInfo, 0, len(*req.Names))
			for _, name := range *req.Names {
				ni := framework.NewNodeInfo()
				ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
				nodes = append(nodes, ni)
			}
			_ = out.Encode(reply{})
			continue
		}
		ext, ok := extenders[req.URL]
		if !ok {
			// as KubeSchedulerConfiguration's extenders entry in kube-scheduler-config.ts
			var err error
			ext, err = scheduler.NewHTTPExtender(&schedulerapi.Extender{
				URLPrefix:        req.URL,
				FilterVerb:       "filter",
				PrioritizeVerb:   "prioritize",
				Weight:           1,
				NodeCacheCapable: true,
				HTTPTimeout:      metav1.Duration{Duration: 5 * time.Second},
			})
			if err != nil {
				_ = out.Encode(reply{Error: err.Error()})
				continue
			}
			extenders[req.URL] = ext
		}
		c0 := preemptions()
		start := time.Now()
		passed, _, _, err := ext.Filter(req.Pod, nodes)
		if err == nil {
			_, _, err = ext.Prioritize(req.Pod, passed)
		}
		elapsed := time.Since(start)
		c1 := preemptions()
		if err != nil {
			_ = out.Encode(reply{Error: fmt.Sprintf("round against %s: %v", req.URL, err)})
			continue
		}
		startMs := float64(start.UnixNano()) / 1e6
		_ = out.Encode(reply{StartMs: startMs, EndMs: startMs + float64(elapsed.Nanoseconds())/1e6, Feasible: len(passed), ClientPreempted: c1 - c0})
		if *gcBetweenRounds {
			runtime.GC()
		}
	}
}
