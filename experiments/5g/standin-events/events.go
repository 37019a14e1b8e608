// Package events prints the stand-ins' protocol events (issue 41), one JSON line each on stdout:
// {"t_ns": unix nanoseconds, "ts": RFC 3339, "src": the stand-in, "event": name, ...fields}. t_ns
// is what a harness subtracts (the same host clock as its own stamps).
package events

import (
	"encoding/json"
	"os"
	"sync"
	"time"
)

var mu sync.Mutex

// Emit prints one event of stand-in src.
func Emit(src, event string, fields map[string]any) {
	now := time.Now()
	m := map[string]any{"t_ns": now.UnixNano(), "ts": now.UTC().Format(time.RFC3339Nano), "src": src, "event": event}
	for k, v := range fields {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	mu.Lock()
	os.Stdout.Write(append(b, '\n'))
	mu.Unlock()
}
