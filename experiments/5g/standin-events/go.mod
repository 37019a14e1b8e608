module ulysses.local/standin-events

go 1.26
