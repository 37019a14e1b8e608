// smf-standin: the first piece of the SMF stand-in of issue 41. It sets up a PFCP association with a
// UPF (SMF-initiated, TS 29.244 §6.2.6): sends one Association Setup Request and prints the
// response's cause, the UPF's Node ID and its UP function features, and the round trip. Exits 0 on
// cause "Request accepted", 1 on another cause, 2 on no answer within --timeout (never hangs).
//
//	smf-standin --upf 10.203.0.2:8805 [--local 10.203.0.1:8805] [--node-id 10.203.0.1] [--timeout 2s]
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/wmnsk/go-pfcp/ie"
	"github.com/wmnsk/go-pfcp/message"
)

func main() {
	upf := flag.String("upf", "", "the UPF's PFCP address, host:port")
	local := flag.String("local", "", "local PFCP address to send from, host:port (default: any)")
	nodeID := flag.String("node-id", "", "our PFCP Node ID, an IPv4 address (default: the local address)")
	timeout := flag.Duration("timeout", 2*time.Second, "how long to wait for the response")
	flag.Parse()
	if *upf == "" {
		fmt.Fprintln(os.Stderr, "smf-standin: --upf host:port is required")
		os.Exit(2)
	}
	raddr, err := net.ResolveUDPAddr("udp4", *upf)
	fail(err, "resolving --upf")
	var laddr *net.UDPAddr
	if *local != "" {
		laddr, err = net.ResolveUDPAddr("udp4", *local)
		fail(err, "resolving --local")
	}
	conn, err := net.DialUDP("udp4", laddr, raddr)
	fail(err, "opening the PFCP socket")
	defer conn.Close()
	if *nodeID == "" {
		*nodeID = conn.LocalAddr().(*net.UDPAddr).IP.String()
	}

	const seq = 1
	req := message.NewAssociationSetupRequest(seq,
		ie.NewNodeID(*nodeID, "", ""),
		ie.NewRecoveryTimeStamp(time.Now()),
	)
	b, err := req.Marshal()
	fail(err, "encoding the Association Setup Request")
	start := time.Now()
	_, err = conn.Write(b)
	fail(err, "sending the Association Setup Request")
	fmt.Printf("sent Association Setup Request (seq %d, node ID %s) to %s\n", seq, *nodeID, raddr)

	buf := make([]byte, 65535)
	deadline := start.Add(*timeout)
	for {
		_ = conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			fmt.Printf("no Association Setup Response from %s within %s: %v\n", raddr, *timeout, err)
			os.Exit(2)
		}
		msg, err := message.Parse(buf[:n])
		if err != nil {
			fmt.Printf("ignoring an undecodable PFCP message (%d bytes): %v\n", n, err)
			continue
		}
		res, ok := msg.(*message.AssociationSetupResponse)
		if !ok || res.SequenceNumber != seq {
			fmt.Printf("ignoring %s (seq %d)\n", msg.MessageTypeName(), msg.Sequence())
			continue
		}
		rtt := time.Since(start)
		cause, err := res.Cause.Cause()
		fail(err, "decoding the response's Cause")
		upfID := "(none)"
		if res.NodeID != nil {
			if id, err := res.NodeID.NodeID(); err == nil {
				upfID = id
			}
		}
		features := "(none)"
		if res.UPFunctionFeatures != nil {
			features = fmt.Sprintf("%x", res.UPFunctionFeatures.Payload)
		}
		fmt.Printf("Association Setup Response: cause %d (%s), UPF node ID %s, UP function features %s, round trip %s\n",
			cause, causeName(cause), upfID, features, rtt.Round(time.Microsecond))
		if cause != ie.CauseRequestAccepted {
			os.Exit(1)
		}
		return
	}
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
	default:
		return "see TS 29.244 §8.2.1"
	}
}

func fail(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "smf-standin: %s: %v\n", what, err)
		os.Exit(2)
	}
}
