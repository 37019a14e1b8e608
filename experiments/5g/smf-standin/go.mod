module ulysses.local/smf-standin

go 1.26

require github.com/wmnsk/go-pfcp v0.0.24

require ulysses.local/standin-events v0.0.0

replace ulysses.local/standin-events => ../standin-events
