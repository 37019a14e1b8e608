package main

import (
	"context"
	"os"
	"strings"
	"time"
)

// Source tells the SMF where the UPF's PFCP endpoint is. Watch sends the current address (host or
// host:port) and then every change; the SMF treats every new value as a new UPF. The sources here
// are a fixed address and a file; the Kubernetes one (next step) watches the UPF Service's
// EndpointSlices and sends the ready endpoint's pod IP, so the SMF never uses a fixed address.
type Source interface {
	Watch(ctx context.Context) <-chan string
}

// StaticSource: one fixed address.
type StaticSource string

func (s StaticSource) Watch(ctx context.Context) <-chan string {
	ch := make(chan string, 1)
	ch <- string(s)
	return ch
}

// FileSource: the first line of a file, re-read every Poll. A missing or empty file means "no UPF
// yet". Writers should replace the file atomically (write a temporary file, rename it).
type FileSource struct {
	Path string
	Poll time.Duration
}

func (f *FileSource) Watch(ctx context.Context) <-chan string {
	ch := make(chan string, 1)
	go func() {
		defer close(ch)
		last := ""
		t := time.NewTicker(f.Poll)
		defer t.Stop()
		for {
			if b, err := os.ReadFile(f.Path); err == nil {
				a := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
				if a != "" && a != last {
					last = a
					select {
					case ch <- a:
					case <-ctx.Done():
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return ch
}
