package main

import (
	"time"

	"ulysses.local/standin-events"
)

func emit(event string, fields map[string]any) { events.Emit("smf", event, fields) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
