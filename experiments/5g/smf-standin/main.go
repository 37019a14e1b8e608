// smf-standin: the SMF stand-in of issue 41. It plays the part of the SMF towards a UPF over PFCP
// (TS 29.244) and nothing else: no NAS, no N11/N4 procedures beyond what the user plane needs.
//
//   - finds the UPF's PFCP address through an address source (--upf: fixed; --upf-file: a file it
//     re-reads; later a Kubernetes EndpointSlice watch), see source.go;
//   - sets up a PFCP association (SMF-initiated), then N sessions (Session Establishment with the
//     PDRs/FARs/QER eUPF needs: uplink = GTP-U decapsulation and forwarding to N6, downlink = GTP-U
//     encapsulation towards the gNB with the downlink TEID);
//   - sends PFCP heartbeats (--hb-interval, --hb-timeout, --hb-retries) and answers the UPF's;
//   - on a new UPF address, associates with it and re-establishes the same sessions (same UE IPs,
//     same TEIDs, same SEIDs), as Open5GS' PFCP restoration does;
//   - then, in parallel, points the data network at the new UPF (--n6-route-cmd, optional) and tells
//     the gNB stand-in the new N3 address (--gnb-control: a UDP control message, acknowledged, retried);
//   - prints one JSON line per event on stdout (see event.go) for a harness to read.
//
// --associate-only keeps the first piece's behaviour (one Association Setup, exit 0 on "accepted").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

type config struct {
	local       string
	nodeID      string
	ueIP        net.IP
	ulTEID      uint32
	dlTEID      uint32
	sessions    int
	gnbN3       net.IP
	gnbControl  string
	n6RouteCmd  string
	qfi         uint8
	reqTimeout  time.Duration
	reqRetries  int
	hbInterval  time.Duration
	hbTimeout   time.Duration
	hbRetries   int
	assocRetry  time.Duration
	gnbRetry    time.Duration
	gnbAttempts int
}

func main() {
	var c config
	upf := flag.String("upf", "", "the UPF's PFCP address, host[:port] (fixed address source)")
	upfFile := flag.String("upf-file", "", "file holding the UPF's PFCP address host[:port], re-read every --poll (address source)")
	poll := flag.Duration("poll", 10*time.Millisecond, "how often --upf-file is re-read")
	flag.StringVar(&c.local, "local", "0.0.0.0:8805", "local PFCP address host:port (eUPF sends its heartbeats to <our node ID>:8805)")
	flag.StringVar(&c.nodeID, "node-id", "", "our PFCP Node ID, an IPv4 address (default: the local address)")
	ueIP := flag.String("ue-ip", "10.204.0.10", "the first session's UE IPv4 address (session i gets UE IP + i)")
	ulTEID := flag.Uint("ul-teid", 0x100, "the first session's uplink TEID (UPF side of N3; session i: + i)")
	dlTEID := flag.Uint("dl-teid", 0x200, "the first session's downlink TEID (gNB side of N3; session i: + i)")
	flag.IntVar(&c.sessions, "sessions", 1, "number of PDU sessions")
	gnbN3 := flag.String("gnb-n3", "", "the gNB's N3 IPv4 address (downlink GTP-U goes there)")
	flag.StringVar(&c.gnbControl, "gnb-control", "", "the gNB stand-in's control address host:port (UDP); empty: do not tell the gNB")
	flag.StringVar(&c.n6RouteCmd, "n6-route-cmd", "", "shell command run on every new UPF once the sessions are up (beside telling the gNB), {upf} = the UPF's IP; e.g. 'ip route replace 10.204.0.0/16 via {upf}'")
	qfi := flag.Uint("qfi", 9, "QFI in the QER")
	flag.DurationVar(&c.reqTimeout, "req-timeout", 500*time.Millisecond, "PFCP request timeout (T1)")
	flag.IntVar(&c.reqRetries, "req-retries", 3, "PFCP request retransmissions (N1)")
	flag.DurationVar(&c.hbInterval, "hb-interval", 2*time.Second, "PFCP heartbeat period")
	flag.DurationVar(&c.hbTimeout, "hb-timeout", time.Second, "heartbeat response timeout")
	flag.IntVar(&c.hbRetries, "hb-retries", 3, "unanswered heartbeats in a row before heartbeat-lost")
	flag.DurationVar(&c.assocRetry, "assoc-retry", 200*time.Millisecond, "pause between failed association attempts")
	flag.DurationVar(&c.gnbRetry, "gnb-retry", 100*time.Millisecond, "gNB control message retransmission period")
	flag.IntVar(&c.gnbAttempts, "gnb-attempts", 30, "gNB control message attempts")
	assocOnly := flag.Bool("associate-only", false, "send one Association Setup Request, print the answer, exit (0 accepted, 1 other cause, 2 no answer)")
	flag.Parse()

	c.ueIP = net.ParseIP(*ueIP).To4()
	c.ulTEID, c.dlTEID, c.qfi = uint32(*ulTEID), uint32(*dlTEID), uint8(*qfi)
	if *gnbN3 != "" {
		c.gnbN3 = net.ParseIP(*gnbN3).To4()
	}
	var src Source
	switch {
	case *upf != "" && *upfFile != "":
		usage("--upf and --upf-file exclude each other")
	case *upf != "":
		src = StaticSource(withPort(*upf))
	case *upfFile != "":
		src = &FileSource{Path: *upfFile, Poll: *poll}
	default:
		usage("an address source is required: --upf host[:port] or --upf-file PATH")
	}
	if c.ueIP == nil {
		usage("--ue-ip must be an IPv4 address")
	}
	if !*assocOnly && c.gnbN3 == nil {
		usage("--gnb-n3 (an IPv4 address) is required")
	}

	laddr, err := net.ResolveUDPAddr("udp4", c.local)
	fail(err, "resolving --local")
	conn, err := net.ListenUDP("udp4", laddr)
	fail(err, "opening the PFCP socket")
	if c.nodeID == "" {
		c.nodeID = laddr.IP.String()
		if laddr.IP.IsUnspecified() {
			usage("--node-id is required with an unspecified --local address")
		}
	}
	p := newPeer(conn, c.nodeID)
	go p.readLoop()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()

	if *assocOnly {
		os.Exit(associateOnce(ctx, p, src, c))
	}
	emit("start", map[string]any{"node_id": c.nodeID, "local": conn.LocalAddr().String(), "sessions": c.sessions,
		"ue_ip": c.ueIP.String(), "ul_teid": c.ulTEID, "dl_teid": c.dlTEID, "gnb_n3": c.gnbN3.String(),
		"hb_interval_ms": ms(c.hbInterval), "hb_timeout_ms": ms(c.hbTimeout), "hb_retries": c.hbRetries})
	run(ctx, p, src, c)
	emit("stop", nil)
}

func associateOnce(ctx context.Context, p *peer, src Source, c config) int {
	addrs := src.Watch(ctx)
	addr := <-addrs
	raddr, err := net.ResolveUDPAddr("udp4", addr)
	fail(err, "resolving the UPF address")
	start := time.Now()
	res, err := p.request(ctx, message.NewAssociationSetupRequest(0, ie.NewNodeID(c.nodeID, "", ""),
		ie.NewRecoveryTimeStamp(p.recovery)), raddr, 2*time.Second, 0)
	if err != nil {
		fmt.Printf("no Association Setup Response from %s: %v\n", raddr, err)
		return 2
	}
	r := res.(*message.AssociationSetupResponse)
	cause := causeOf(r.Cause)
	fmt.Printf("Association Setup Response: cause %d (%s), UPF node ID %s, UP function features %s, round trip %s\n",
		cause, causeName(cause), nodeIDOf(r.NodeID), featuresOf(r.UPFunctionFeatures), time.Since(start).Round(time.Microsecond))
	if cause != ie.CauseRequestAccepted {
		return 1
	}
	return 0
}

// run is the SMF's control loop: one UPF at a time; a new address from the source replaces the
// current UPF at once (whatever its state); heartbeats watch the current one.
func run(ctx context.Context, p *peer, src Source, c config) {
	addrs := src.Watch(ctx)
	var cur *upfState
	var hbTick <-chan time.Time
	var ticker *time.Ticker
	for {
		select {
		case <-ctx.Done():
			if cur != nil {
				cur.cancel()
			}
			return
		case a, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
			a = withPort(a)
			if cur != nil && cur.addr == a {
				continue
			}
			old := ""
			if cur != nil {
				old = cur.addr
				cur.cancel()
			}
			emit("upf-address", map[string]any{"upf": a, "previous": old})
			cur = newUPFState(ctx, a)
			go cur.establish(p, c)
			if ticker != nil {
				ticker.Stop()
			}
			ticker = time.NewTicker(c.hbInterval)
			hbTick = ticker.C
		case <-hbTick:
			if cur != nil && cur.isUp() {
				go cur.heartbeat(p, c)
			}
		}
	}
}

type upfState struct {
	addr   string
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	up     bool // associated and sessions established
	missed int
	hbBusy bool
	remote time.Time // the UPF's Recovery Time Stamp
}

func newUPFState(parent context.Context, addr string) *upfState {
	ctx, cancel := context.WithCancel(parent)
	return &upfState{addr: addr, ctx: ctx, cancel: cancel}
}

func (u *upfState) isUp() bool { u.mu.Lock(); defer u.mu.Unlock(); return u.up }

// establish: association (retried until accepted or the UPF is replaced), then the sessions, then
// the N6 route and the gNB. Every step emits its event; failures are events too, never a hang.
func (u *upfState) establish(p *peer, c config) {
	raddr, err := net.ResolveUDPAddr("udp4", u.addr)
	if err != nil {
		emit("error", map[string]any{"upf": u.addr, "error": "resolving the UPF address: " + err.Error()})
		return
	}
	t0 := time.Now()
	attempt := 0
	for {
		attempt++
		start := time.Now()
		res, err := p.request(u.ctx, message.NewAssociationSetupRequest(0, ie.NewNodeID(c.nodeID, "", ""),
			ie.NewRecoveryTimeStamp(p.recovery)), raddr, c.reqTimeout, c.reqRetries)
		if u.ctx.Err() != nil {
			return
		}
		if err == nil {
			r := res.(*message.AssociationSetupResponse)
			cause := causeOf(r.Cause)
			if cause == ie.CauseRequestAccepted {
				if r.RecoveryTimeStamp != nil {
					if ts, err := r.RecoveryTimeStamp.RecoveryTimeStamp(); err == nil {
						u.mu.Lock()
						u.remote = ts
						u.mu.Unlock()
					}
				}
				emit("association", map[string]any{"upf": u.addr, "upf_node_id": nodeIDOf(r.NodeID), "attempt": attempt,
					"rtt_ms": ms(time.Since(start)), "features": featuresOf(r.UPFunctionFeatures)})
				break
			}
			emit("association-failed", map[string]any{"upf": u.addr, "attempt": attempt, "cause": cause, "cause_name": causeName(cause)})
		} else {
			emit("association-failed", map[string]any{"upf": u.addr, "attempt": attempt, "error": err.Error()})
		}
		select {
		case <-u.ctx.Done():
			return
		case <-time.After(c.assocRetry):
		}
	}

	upfIP := raddr.IP.To4()
	for i := 0; i < c.sessions; i++ {
		s := sessionFor(c, i)
		start := time.Now()
		res, err := p.request(u.ctx, s.establishmentRequest(c, upfIP), raddr, c.reqTimeout, c.reqRetries)
		if u.ctx.Err() != nil {
			return
		}
		fields := map[string]any{"upf": u.addr, "session": i, "cp_seid": s.seid, "ue_ip": s.ueIP.String(),
			"ul_teid": s.ulTEID, "dl_teid": s.dlTEID, "rtt_ms": ms(time.Since(start))}
		if err != nil {
			fields["error"] = err.Error()
			emit("session-failed", fields)
			return
		}
		r := res.(*message.SessionEstablishmentResponse)
		cause := causeOf(r.Cause)
		if cause != ie.CauseRequestAccepted {
			fields["cause"], fields["cause_name"] = cause, causeName(cause)
			emit("session-failed", fields)
			return
		}
		if r.UPFSEID != nil {
			if f, err := r.UPFSEID.FSEID(); err == nil {
				fields["up_seid"] = f.SEID
			}
		}
		emit("session-established", fields)
	}
	u.mu.Lock()
	u.up = true
	u.mu.Unlock()
	emit("sessions-ready", map[string]any{"upf": u.addr, "sessions": c.sessions, "ms_since_address": ms(time.Since(t0))})

	// the N6 route and the gNB in parallel: the downlink needs the first, the uplink the second
	var wg sync.WaitGroup
	if c.n6RouteCmd != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := strings.ReplaceAll(c.n6RouteCmd, "{upf}", upfIP.String())
			start := time.Now()
			out, err := exec.CommandContext(u.ctx, "sh", "-c", cmd).CombinedOutput()
			f := map[string]any{"upf": u.addr, "cmd": cmd, "ms": ms(time.Since(start))}
			if err != nil {
				f["error"] = fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))
				emit("n6-route-failed", f)
			} else {
				emit("n6-route-updated", f)
			}
		}()
	}
	if c.gnbControl != "" {
		wg.Add(1)
		go func() { defer wg.Done(); tellGNB(u.ctx, c, upfIP.String()) }()
	}
	wg.Wait()
}

// heartbeat: one Heartbeat Request; counts misses; a changed Recovery Time Stamp means the UPF
// restarted and lost its state, so the sessions are established again.
func (u *upfState) heartbeat(p *peer, c config) {
	u.mu.Lock()
	if u.hbBusy {
		u.mu.Unlock()
		return
	}
	u.hbBusy = true
	u.mu.Unlock()
	defer func() { u.mu.Lock(); u.hbBusy = false; u.mu.Unlock() }()
	raddr, err := net.ResolveUDPAddr("udp4", u.addr)
	if err != nil {
		return
	}
	start := time.Now()
	res, err := p.request(u.ctx, message.NewHeartbeatRequest(0, ie.NewRecoveryTimeStamp(p.recovery), nil), raddr, c.hbTimeout, 0)
	if u.ctx.Err() != nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err != nil {
		u.missed++
		emit("heartbeat-missed", map[string]any{"upf": u.addr, "missed": u.missed})
		if u.missed >= c.hbRetries && u.up {
			u.up = false
			emit("heartbeat-lost", map[string]any{"upf": u.addr, "missed": u.missed})
			// keep trying the same address (a UPF restarted in place); a new address from the
			// source replaces this state anyway
			go u.reestablishAfterLoss(p, c)
		}
		return
	}
	u.missed = 0
	r := res.(*message.HeartbeatResponse)
	if r.RecoveryTimeStamp != nil {
		if ts, err := r.RecoveryTimeStamp.RecoveryTimeStamp(); err == nil && !u.remote.IsZero() && !ts.Equal(u.remote) {
			u.up = false
			emit("upf-restarted", map[string]any{"upf": u.addr, "recovery_ts": ts.Unix()})
			go u.establish(p, c)
			return
		}
	}
	if os.Getenv("SMF_LOG_HEARTBEATS") != "" {
		emit("heartbeat", map[string]any{"upf": u.addr, "rtt_ms": ms(time.Since(start))})
	}
}

func (u *upfState) reestablishAfterLoss(p *peer, c config) {
	u.mu.Lock()
	u.missed = 0
	u.mu.Unlock()
	u.establish(p, c)
}

// tellGNB sends {"upf_n3": ip, "seq": n} to the gNB stand-in's control port until it answers
// {"ack": n}: UDP, small, retransmitted, so the gNB may start late or a packet may be lost.
var gnbSeq struct {
	sync.Mutex
	n int
}

func tellGNB(ctx context.Context, c config, n3 string) {
	gnbSeq.Lock()
	gnbSeq.n++
	seq := gnbSeq.n
	gnbSeq.Unlock()
	raddr, err := net.ResolveUDPAddr("udp4", c.gnbControl)
	if err != nil {
		emit("gnb-update-failed", map[string]any{"error": err.Error()})
		return
	}
	conn, err := net.DialUDP("udp4", nil, raddr)
	if err != nil {
		emit("gnb-update-failed", map[string]any{"error": err.Error()})
		return
	}
	defer conn.Close()
	msg := fmt.Sprintf(`{"upf_n3":%q,"seq":%d}`, n3, seq)
	want := fmt.Sprintf(`{"ack":%d}`, seq)
	start := time.Now()
	buf := make([]byte, 512)
	for attempt := 1; attempt <= c.gnbAttempts; attempt++ {
		if ctx.Err() != nil {
			return
		}
		_, _ = conn.Write([]byte(msg))
		_ = conn.SetReadDeadline(time.Now().Add(c.gnbRetry))
		for {
			n, err := conn.Read(buf)
			if err != nil {
				break // timeout or ICMP refused: retransmit
			}
			if strings.TrimSpace(string(buf[:n])) == want {
				emit("gnb-updated", map[string]any{"upf_n3": n3, "gnb_control": c.gnbControl, "attempt": attempt, "rtt_ms": ms(time.Since(start))})
				return
			}
		}
		if d := time.Until(start.Add(time.Duration(attempt) * c.gnbRetry)); d > 0 {
			time.Sleep(d)
		}
	}
	emit("gnb-update-failed", map[string]any{"upf_n3": n3, "gnb_control": c.gnbControl, "error": fmt.Sprintf("no ack after %d attempts", c.gnbAttempts)})
}

type session struct {
	seid           uint64
	ueIP           net.IP
	ulTEID, dlTEID uint32
}

func sessionFor(c config, i int) session {
	ue := make(net.IP, 4)
	copy(ue, c.ueIP)
	v := uint32(ue[0])<<24 | uint32(ue[1])<<16 | uint32(ue[2])<<8 | uint32(ue[3]) + uint32(i)
	ue[0], ue[1], ue[2], ue[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
	return session{seid: uint64(i) + 1, ueIP: ue, ulTEID: c.ulTEID + uint32(i), dlTEID: c.dlTEID + uint32(i)}
}

// establishmentRequest: what eUPF v0.7.1 needs (cmd/core/pfcp_session_handlers.go,
// pdr_creation_context.go, and the XDP program n3n6_entrypoint.c):
//   - Node ID and CP F-SEID (else "Mandatory IE missing");
//   - uplink PDR 1: PDI{Source Interface Access, F-TEID(ul TEID, UPF N3 IP)}, Outer Header Removal
//     GTP-U/UDP/IPv4, FAR 1, QER 1  ->  eUPF's uplink map keyed by TEID;
//   - downlink PDR 2: PDI{Source Interface Core, UE IP Address}, FAR 2, QER 1  ->  downlink map
//     keyed by UE IP;
//   - FAR 1: FORW, Destination Interface Core (decapsulated packet routed with bpf_fib_lookup);
//   - FAR 2: FORW, Destination Interface Access, Outer Header Creation GTP-U/UDP/IPv4 (dl TEID, gNB);
//   - QER 1: gates open (the XDP program drops packets whose PDR has no QER), QFI, no MBR (0 =
//     unlimited).
//
// The SMF chooses the F-TEID and the UE IP itself (no CHOOSE flag; eUPF's FTUP/UEIP features off),
// so the same values can be given to a new UPF.
func (s session) establishmentRequest(c config, upfN3 net.IP) message.Message {
	const (
		ulPDR, dlPDR = 1, 2
		ulFAR, dlFAR = 1, 2
		qerID        = 1
	)
	return message.NewSessionEstablishmentRequest(0, 0, 0, 0, 0,
		ie.NewNodeID(c.nodeID, "", ""),
		ie.NewFSEID(s.seid, net.ParseIP(c.nodeID), nil),
		ie.NewCreatePDR(
			ie.NewPDRID(ulPDR),
			ie.NewPrecedence(100),
			ie.NewPDI(
				ie.NewSourceInterface(ie.SrcInterfaceAccess),
				ie.NewFTEID(0x01, s.ulTEID, upfN3, nil, 0),
				ie.NewNetworkInstance("internet"),
			),
			ie.NewOuterHeaderRemoval(0, 0), // GTP-U/UDP/IPv4
			ie.NewFARID(ulFAR),
			ie.NewQERID(qerID),
		),
		ie.NewCreatePDR(
			ie.NewPDRID(dlPDR),
			ie.NewPrecedence(100),
			ie.NewPDI(
				ie.NewSourceInterface(ie.SrcInterfaceCore),
				ie.NewUEIPAddress(0x02|0x04, s.ueIP.String(), "", 0, 0), // V4, S/D = destination
				ie.NewNetworkInstance("internet"),
			),
			ie.NewFARID(dlFAR),
			ie.NewQERID(qerID),
		),
		ie.NewCreateFAR(
			ie.NewFARID(ulFAR),
			ie.NewApplyAction(0x02), // FORW
			ie.NewForwardingParameters(
				ie.NewDestinationInterface(ie.DstInterfaceCore),
				ie.NewNetworkInstance("internet"),
			),
		),
		ie.NewCreateFAR(
			ie.NewFARID(dlFAR),
			ie.NewApplyAction(0x02), // FORW
			ie.NewForwardingParameters(
				ie.NewDestinationInterface(ie.DstInterfaceAccess),
				ie.NewOuterHeaderCreation(0x0100, s.dlTEID, c.gnbN3.String(), "", 0, 0, 0), // GTP-U/UDP/IPv4
			),
		),
		ie.NewCreateQER(
			ie.NewQERID(qerID),
			ie.NewGateStatus(ie.GateStatusOpen, ie.GateStatusOpen),
			ie.NewQFI(c.qfi),
		),
	)
}

// peer: one PFCP socket; requests are matched to responses by sequence number, requests from the
// UPF (heartbeats) are answered.
type peer struct {
	conn     *net.UDPConn
	nodeID   string
	recovery time.Time
	mu       sync.Mutex
	seq      uint32
	waiting  map[uint32]chan message.Message
}

func newPeer(conn *net.UDPConn, nodeID string) *peer {
	return &peer{conn: conn, nodeID: nodeID, recovery: time.Now(), waiting: map[uint32]chan message.Message{}}
}

var errTimeout = errors.New("no response")

func (p *peer) request(ctx context.Context, m message.Message, raddr *net.UDPAddr, timeout time.Duration, retries int) (message.Message, error) {
	p.mu.Lock()
	p.seq = (p.seq + 1) & 0xffffff
	if p.seq == 0 {
		p.seq = 1
	}
	seq := p.seq
	ch := make(chan message.Message, 1)
	p.waiting[seq] = ch
	p.mu.Unlock()
	defer func() { p.mu.Lock(); delete(p.waiting, seq); p.mu.Unlock() }()
	m.SetSequenceNumber(seq)
	b := make([]byte, m.MarshalLen())
	if err := m.MarshalTo(b); err != nil {
		return nil, err
	}
	for try := 0; try <= retries; try++ {
		if _, err := p.conn.WriteToUDP(b, raddr); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case res := <-ch:
			return res, nil
		case <-time.After(timeout):
		}
	}
	return nil, fmt.Errorf("%w from %s to %s after %d tries of %s", errTimeout, raddr, m.MessageTypeName(), retries+1, timeout)
}

func (p *peer) readLoop() {
	buf := make([]byte, 65535)
	for {
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ICMP port unreachable from a dead UPF
		}
		// Parse keeps slices of its input: give every message its own copy, buf is reused
		raw := make([]byte, n)
		copy(raw, buf[:n])
		msg, err := message.Parse(raw)
		if err != nil {
			emit("pfcp-undecodable", map[string]any{"from": from.String(), "bytes": n, "error": err.Error()})
			continue
		}
		switch m := msg.(type) {
		case *message.HeartbeatRequest:
			b, _ := message.NewHeartbeatResponse(m.SequenceNumber, ie.NewRecoveryTimeStamp(p.recovery)).Marshal()
			_, _ = p.conn.WriteToUDP(b, from)
			continue
		}
		p.mu.Lock()
		ch, ok := p.waiting[msg.Sequence()]
		p.mu.Unlock()
		if ok {
			select {
			case ch <- msg:
			default:
			}
		}
	}
}

func causeOf(c *ie.IE) uint8 {
	if c == nil {
		return 0
	}
	v, err := c.Cause()
	if err != nil {
		return 0
	}
	return v
}

func nodeIDOf(i *ie.IE) string {
	if i == nil {
		return "(none)"
	}
	if id, err := i.NodeID(); err == nil {
		return id
	}
	return "(undecodable)"
}

func featuresOf(i *ie.IE) string {
	if i == nil {
		return "(none)"
	}
	return fmt.Sprintf("%x", i.Payload)
}

func causeName(c uint8) string {
	switch c {
	case ie.CauseRequestAccepted:
		return "Request accepted"
	case ie.CauseRequestRejected:
		return "Request rejected"
	case ie.CauseMandatoryIEMissing:
		return "Mandatory IE missing"
	case ie.CauseMandatoryIEIncorrect:
		return "Mandatory IE incorrect"
	case ie.CauseNoEstablishedPFCPAssociation:
		return "No established PFCP Association"
	case ie.CauseRuleCreationModificationFailure:
		return "Rule creation/modification Failure"
	default:
		return "see TS 29.244 §8.2.1"
	}
}

func withPort(a string) string {
	if _, _, err := net.SplitHostPort(a); err == nil {
		return a
	}
	return net.JoinHostPort(a, "8805")
}

func usage(msg string) {
	fmt.Fprintln(os.Stderr, "smf-standin: "+msg)
	os.Exit(2)
}

func fail(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "smf-standin: %s: %v\n", what, err)
		os.Exit(2)
	}
}
