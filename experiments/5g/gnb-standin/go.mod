module ulysses.local/gnb-standin

go 1.26

require github.com/wmnsk/go-gtp v0.8.12

require (
	github.com/vishvananda/netlink v1.3.0 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
	golang.org/x/net v0.39.0 // indirect
	golang.org/x/sys v0.32.0 // indirect
)

require ulysses.local/standin-events v0.0.0

replace ulysses.local/standin-events => ../standin-events
