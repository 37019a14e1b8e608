module ulysses.local/smf-standin

go 1.26

require github.com/wmnsk/go-pfcp v0.0.24
