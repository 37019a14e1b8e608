// gnb-standin: the gNB/UE stand-in of issue 41, and the data network's echo.
//
// gNB mode (default): one UE with one PDU session. Every --interval it sends an uplink G-PDU (GTP-U,
// TEID --ul-teid) to the current UPF's N3 address: inside, an IPv4/UDP packet from the UE IP to the
// data-network echo (--dn), carrying a sequence number. It receives the downlink G-PDUs (TEID
// --dl-teid) the UPF makes of the echo's replies. The UPF's N3 address comes from --upf-n3 and/or
// the SMF stand-in's control messages on --control (UDP, {"upf_n3": ip, "seq": n}, answered
// {"ack": n}): the N2 "PDU session resource modify" this stands in for. Built on go-gtp v0.8.12
// with Error Indications disabled (else it would answer downlink packets with them).
//
// Events, one JSON line each on stdout: start, n3-changed (= gNB updated), first-reply (the first
// downlink reply through a UPF), connection-restored (the first downlink reply through the new UPF
// after an N3 change), stats (every --stats and at exit).
//
// echo mode (`gnb-standin echo --listen host:port`): a UDP echo, the data network's server.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"ulysses.local/standin-events"

	"github.com/wmnsk/go-gtp/gtpv1"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "echo" {
		echoMain(os.Args[2:])
		return
	}
	n3 := flag.String("n3", "", "our N3 address ip[:port] (GTP-U, port 2152)")
	upfN3 := flag.String("upf-n3", "", "the UPF's N3 address to start with (empty: wait for the SMF's control message)")
	control := flag.String("control", "", "UDP address for the SMF's control messages, host:port")
	ueIPs := flag.String("ue-ip", "10.204.0.10", "the UE's IPv4 address")
	ueport := flag.Uint("ue-port", 40000, "the UE's UDP source port")
	dn := flag.String("dn", "", "the data-network echo, ip:port")
	ulTEID := flag.Uint("ul-teid", 0x100, "uplink TEID (the UPF's F-TEID the SMF chose)")
	dlTEID := flag.Uint("dl-teid", 0x200, "downlink TEID (ours, the SMF put it into the UPF's FAR)")
	interval := flag.Duration("interval", 20*time.Millisecond, "uplink packet period (10-50 ms)")
	statsEvery := flag.Duration("stats", 0, "print a stats event this often (0: only at exit)")
	flag.Parse()
	if *n3 == "" || *dn == "" || (*upfN3 == "" && *control == "") {
		fmt.Fprintln(os.Stderr, "gnb-standin: --n3, --dn and --upf-n3 or --control are required")
		os.Exit(2)
	}
	laddr, err := net.ResolveUDPAddr("udp4", withPort(*n3, "2152"))
	fail(err, "--n3")
	dnAddr, err := net.ResolveUDPAddr("udp4", *dn)
	fail(err, "--dn")
	ueIP := net.ParseIP(*ueIPs).To4()
	if ueIP == nil {
		fail(fmt.Errorf("not an IPv4 address: %q", *ueIPs), "--ue-ip")
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	g := &gnb{ueIP: ueIP, uePort: uint16(*ueport), dn: dnAddr, ulTEID: uint32(*ulTEID), dlTEID: uint32(*dlTEID),
		sentAt: map[uint32]time.Time{}}
	g.conn = gtpv1.NewUPlaneConn(laddr)
	g.conn.DisableErrorIndication()
	go func() {
		if err := g.conn.ListenAndServe(ctx); err != nil {
			emit("error", map[string]any{"error": err.Error()})
			cancel()
		}
	}()
	// ListenAndServe opens the socket in its goroutine; writing before that would use a nil conn
	for i := 0; !g.listening(); i++ {
		if i > 500 {
			fail(fmt.Errorf("GTP-U socket on %s not open after 5 s", laddr), "--n3")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if *upfN3 != "" {
		g.setUPF(withPort(*upfN3, "2152"), 0)
	}
	if *control != "" {
		caddr, err := net.ResolveUDPAddr("udp4", *control)
		fail(err, "--control")
		cc, err := net.ListenUDP("udp4", caddr)
		fail(err, "--control")
		go g.controlLoop(cc)
	}
	emit("start", map[string]any{"n3": laddr.String(), "ue_ip": ueIP.String(), "dn": dnAddr.String(),
		"ul_teid": g.ulTEID, "dl_teid": g.dlTEID, "interval_ms": interval.Milliseconds(), "control": *control})
	go g.receiveLoop()

	t := time.NewTicker(*interval)
	defer t.Stop()
	var st <-chan time.Time
	if *statsEvery > 0 {
		s := time.NewTicker(*statsEvery)
		defer s.Stop()
		st = s.C
	}
	for {
		select {
		case <-ctx.Done():
			g.stats("exit")
			return
		case <-st:
			g.stats("periodic")
		case <-t.C:
			g.sendUplink()
		}
	}
}

type gnb struct {
	conn           *gtpv1.UPlaneConn
	ueIP           net.IP
	uePort         uint16
	dn             *net.UDPAddr
	ulTEID, dlTEID uint32

	mu        sync.Mutex
	upf       *net.UDPAddr // current UPF N3
	epoch     int          // number of N3 changes
	changedAt time.Time
	seq       uint32
	sentAt    map[uint32]time.Time
	firstFrom map[string]bool
	restored  bool
	sent      int
	received  int
	stale     int // replies from a UPF other than the current one
	ipid      uint16
}

func (g *gnb) listening() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return g.conn.LocalAddr() != nil
}

func (g *gnb) setUPF(addr string, ctlSeq int) {
	a, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		emit("error", map[string]any{"error": "UPF N3 address: " + err.Error()})
		return
	}
	g.mu.Lock()
	prev := ""
	if g.upf != nil {
		if g.upf.String() == a.String() {
			g.mu.Unlock()
			return
		}
		prev = g.upf.String()
	}
	g.upf = a
	first := prev == ""
	if !first {
		g.epoch++
		g.changedAt = time.Now()
		g.restored = false
	}
	g.mu.Unlock()
	emit("n3-changed", map[string]any{"upf_n3": a.String(), "previous": prev, "control_seq": ctlSeq, "initial": first})
	// send one uplink packet right away rather than at the next tick
	g.sendUplink()
}

func (g *gnb) controlLoop(cc *net.UDPConn) {
	buf := make([]byte, 1024)
	for {
		n, from, err := cc.ReadFromUDP(buf)
		if err != nil {
			return
		}
		var m struct {
			UPFN3 string `json:"upf_n3"`
			Seq   int    `json:"seq"`
		}
		if err := json.Unmarshal(buf[:n], &m); err != nil || m.UPFN3 == "" {
			emit("control-invalid", map[string]any{"from": from.String(), "data": strings.TrimSpace(string(buf[:n]))})
			continue
		}
		g.setUPF(withPort(m.UPFN3, "2152"), m.Seq)
		_, _ = cc.WriteToUDP([]byte(fmt.Sprintf(`{"ack":%d}`, m.Seq)), from)
	}
}

// payload: "u5g" | seq (4) | epoch (4) | send time unix ns (8)
func (g *gnb) sendUplink() {
	g.mu.Lock()
	if g.upf == nil {
		g.mu.Unlock()
		return
	}
	g.seq++
	seq, epoch, upf := g.seq, g.epoch, g.upf
	g.ipid++
	id := g.ipid
	now := time.Now()
	g.sentAt[seq] = now
	if len(g.sentAt) > 10000 {
		for k := range g.sentAt {
			if k+5000 < seq {
				delete(g.sentAt, k)
			}
		}
	}
	g.sent++
	g.mu.Unlock()
	payload := make([]byte, 19)
	copy(payload, "u5g")
	binary.BigEndian.PutUint32(payload[3:], seq)
	binary.BigEndian.PutUint32(payload[7:], uint32(epoch))
	binary.BigEndian.PutUint64(payload[11:], uint64(now.UnixNano()))
	pkt := ipv4UDP(g.ueIP, g.dn.IP.To4(), g.uePort, uint16(g.dn.Port), id, payload)
	if _, err := g.conn.WriteToGTP(g.ulTEID, pkt, upf); err != nil {
		emit("send-error", map[string]any{"error": err.Error()})
	}
}

func (g *gnb) receiveLoop() {
	buf := make([]byte, 2048)
	for {
		n, raddr, teid, err := g.conn.ReadFromGTP(buf)
		if err != nil {
			return
		}
		now := time.Now()
		if n == 0 {
			continue
		}
		src, dst, sport, dport, payload, ok := parseIPv4UDP(buf[:n])
		if !ok || len(payload) < 19 || string(payload[:3]) != "u5g" {
			emit("downlink-unexpected", map[string]any{"from": raddr.String(), "teid": teid, "bytes": n})
			continue
		}
		seq := binary.BigEndian.Uint32(payload[3:])
		from := raddr.(*net.UDPAddr)
		g.mu.Lock()
		g.received++
		sent, haveSent := g.sentAt[seq]
		delete(g.sentAt, seq)
		cur := g.upf
		viaCurrent := cur != nil && cur.IP.Equal(from.IP)
		if !viaCurrent {
			g.stale++
		}
		if g.firstFrom == nil {
			g.firstFrom = map[string]bool{}
		}
		first := !g.firstFrom[from.IP.String()]
		g.firstFrom[from.IP.String()] = true
		restored := viaCurrent && g.epoch > 0 && !g.restored
		if restored {
			g.restored = true
		}
		changedAt, epoch := g.changedAt, g.epoch
		g.mu.Unlock()
		f := map[string]any{"via": from.IP.String(), "teid": teid, "seq": seq, "ue_ip": dst.String(), "dn": src.String(),
			"dn_port": sport, "ue_port": dport, "epoch": epoch}
		if haveSent {
			f["rtt_ms"] = float64(now.Sub(sent).Microseconds()) / 1000
		}
		if teid != g.dlTEID {
			f["unexpected_teid"] = true
		}
		if first {
			emit("first-reply", f)
		}
		if restored {
			f["ms_since_n3_change"] = float64(now.Sub(changedAt).Microseconds()) / 1000
			emit("connection-restored", f)
		}
	}
}

func (g *gnb) stats(why string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	emit("stats", map[string]any{"why": why, "sent": g.sent, "received": g.received, "stale": g.stale, "epoch": g.epoch})
}

// ---- the data network's echo ---------------------------------------------------------------------

func echoMain(args []string) {
	fs := flag.NewFlagSet("echo", flag.ExitOnError)
	listen := fs.String("listen", "", "UDP address to echo on, host:port")
	_ = fs.Parse(args)
	a, err := net.ResolveUDPAddr("udp4", *listen)
	fail(err, "--listen")
	c, err := net.ListenUDP("udp4", a)
	fail(err, "echo socket")
	emitSrc = "dn"
	emit("start", map[string]any{"listen": c.LocalAddr().String()})
	buf := make([]byte, 65535)
	seen := map[string]bool{}
	for {
		n, from, err := c.ReadFromUDP(buf)
		if err != nil {
			fail(err, "echo read")
		}
		if !seen[from.String()] {
			seen[from.String()] = true
			emit("first-request", map[string]any{"from": from.String()})
		}
		_, _ = c.WriteToUDP(buf[:n], from)
	}
}

// ---- IPv4/UDP ------------------------------------------------------------------------------------

func ipv4UDP(src, dst net.IP, sport, dport, id uint16, payload []byte) []byte {
	b := make([]byte, 28+len(payload))
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], id)
	b[8] = 64
	b[9] = 17
	copy(b[12:16], src)
	copy(b[16:20], dst)
	binary.BigEndian.PutUint16(b[10:], checksum(b[:20]))
	binary.BigEndian.PutUint16(b[20:], sport)
	binary.BigEndian.PutUint16(b[22:], dport)
	binary.BigEndian.PutUint16(b[24:], uint16(8+len(payload)))
	copy(b[28:], payload)
	// UDP checksum with the pseudo header (0 would be allowed over IPv4; computed anyway)
	ph := make([]byte, 12+8+len(payload))
	copy(ph[0:4], src)
	copy(ph[4:8], dst)
	ph[9] = 17
	binary.BigEndian.PutUint16(ph[10:], uint16(8+len(payload)))
	copy(ph[12:], b[20:])
	cs := checksum(ph)
	if cs == 0 {
		cs = 0xffff
	}
	binary.BigEndian.PutUint16(b[26:], cs)
	return b
}

func parseIPv4UDP(b []byte) (src, dst net.IP, sport, dport uint16, payload []byte, ok bool) {
	if len(b) < 28 || b[0]>>4 != 4 || b[9] != 17 {
		return
	}
	ihl := int(b[0]&0x0f) * 4
	if len(b) < ihl+8 {
		return
	}
	src, dst = net.IP(b[12:16]), net.IP(b[16:20])
	sport, dport = binary.BigEndian.Uint16(b[ihl:]), binary.BigEndian.Uint16(b[ihl+2:])
	ulen := int(binary.BigEndian.Uint16(b[ihl+4:]))
	if ulen < 8 || ihl+ulen > len(b) {
		return
	}
	return src, dst, sport, dport, b[ihl+8 : ihl+ulen], true
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// ---- events --------------------------------------------------------------------------------------

var emitSrc = "gnb"

func emit(event string, fields map[string]any) { events.Emit(emitSrc, event, fields) }

func withPort(a, port string) string {
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a
	}
	return net.JoinHostPort(a, port)
}

func fail(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "gnb-standin: %s: %v\n", what, err)
		os.Exit(2)
	}
}
