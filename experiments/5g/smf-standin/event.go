package main

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

var emitMu sync.Mutex

// emit prints one JSON line on stdout: {"t_ns": unix nanoseconds, "ts": RFC 3339, "src": "smf",
// "event": name, ...fields}. t_ns is what a harness subtracts (same host clock as its own stamps).
func emit(event string, fields map[string]any) {
	now := time.Now()
	m := map[string]any{"t_ns": now.UnixNano(), "ts": now.UTC().Format(time.RFC3339Nano), "src": "smf", "event": event}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	emitMu.Lock()
	os.Stdout.Write(append(b, '\n'))
	emitMu.Unlock()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
