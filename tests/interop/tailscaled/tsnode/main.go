// Command tsnode is one Tailscale node for the tailscaled interop test (tests/interop/tailscaled):
// a tsnet.Server (tailscaled's engine with userspace networking, state in memory) joined to the
// control server at --control, driven by the test over its standard input and output.
//
// The same source is built against two versions of tailscale.com: by this module (the version
// its go.mod pins) and by tests/interop/v1.80 (v1.80.3), whose tsnode/main.go is a link to this
// file. It therefore uses only API present in both versions.
//
// Once the node is up and has a home DERP region it writes one JSON line {"ready": ...}. Then it
// reads one JSON request a line and answers each with one JSON line, in order:
//
//	{"op":"status"}                                  the node and its peers as it sees them
//	{"op":"ping","ip":IP,"type":"disco"|"TSMP","timeout_ms":N}
//	{"op":"send","addr":IP:PORT,"bytes":N,"seed":S,"stall_ms":N}
//	                                                 N pseudo-random bytes over TCP to a node's
//	                                                 sink; the answer has both SHA-256 sums
//	{"op":"probe","ip":IP,"addr":IP:PORT,"timeout_ms":N}
//	                                                 a disco ping, a TSMP ping and a 1 MiB send
//	                                                 at once, each bounded by timeout_ms
//	{"op":"received"}                                what this node's sink has read in all
//
// The sink listens on the tailnet at --sink-port: it reads a connection to its end and answers
// "<bytes> <sha256 hex>\n". End of input closes the node and ends the process.
//
// Direct paths are the test's to turn off, through the environment (TS_DEBUG_ALWAYS_USE_DERP),
// as is trust in the DERP server's CA (SSL_CERT_FILE).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"tailscale.com/ipn/store/mem"
	"tailscale.com/logtail"
	"tailscale.com/net/netns"
	"tailscale.com/tailcfg"
	"tailscale.com/tsnet"
)

type request struct {
	Op        string `json:"op"`
	IP        string `json:"ip,omitempty"`
	Type      string `json:"type,omitempty"`
	TimeoutMs int    `json:"timeout_ms,omitempty"`
	Addr      string `json:"addr,omitempty"`
	Bytes     int64  `json:"bytes,omitempty"`
	Seed      uint64 `json:"seed,omitempty"`
	StallMs   int    `json:"stall_ms,omitempty"`
}

type peer struct {
	Key       string   `json:"key"`
	HostName  string   `json:"host_name"`
	IPs       []string `json:"ips"`
	CurAddr   string   `json:"cur_addr"`
	Relay     string   `json:"relay"`
	Online    bool     `json:"online"`
	RxBytes   int64    `json:"rx_bytes"`
	TxBytes   int64    `json:"tx_bytes"`
	InEngine  bool     `json:"in_engine"`
	LastWrite string   `json:"last_write,omitempty"`
}

type node struct {
	srv *tsnet.Server

	mu            sync.Mutex
	sinkBytes     int64 // bytes the sink has read, all connections
	sinkConns     int64 // connections the sink accepted
	sinkCompleted int64 // connections read to their end and answered
}

func main() {
	control := flag.String("control", "", "control server URL (http://127.0.0.1:PORT)")
	dir := flag.String("dir", "", "state directory")
	hostname := flag.String("hostname", "", "this node's host name")
	sinkPort := flag.Int("sink-port", 5001, "tailnet TCP port of the checksum sink")
	upTimeout := flag.Duration("up-timeout", 2*time.Minute, "bound on reaching Running")
	flag.Parse()
	if *control == "" || *dir == "" || *hostname == "" {
		fmt.Fprintln(os.Stderr, "node: --control, --dir and --hostname are required")
		os.Exit(2)
	}
	log.SetPrefix(*hostname + ": ")
	log.SetFlags(log.Lmicroseconds)
	logtail.Disable()       // nothing is uploaded anywhere
	netns.SetEnabled(false) // loopback only; no SO_MARK needed (as tailscale's own tsnet tests)

	n := &node{srv: &tsnet.Server{
		Dir:        *dir,
		Hostname:   *hostname,
		ControlURL: *control,
		Store:      new(mem.Store),
		Ephemeral:  true,
		Logf:       log.Printf,
		UserLogf:   log.Printf,
	}}
	defer n.srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *upTimeout)
	ready, err := n.up(ctx)
	cancel()
	if err != nil {
		log.Fatalf("up: %v", err)
	}
	ln, err := n.srv.Listen("tcp", ":"+strconv.Itoa(*sinkPort))
	if err != nil {
		log.Fatalf("sink listen: %v", err)
	}
	go n.sink(ln)

	out := json.NewEncoder(os.Stdout)
	if err := out.Encode(map[string]any{"ready": ready}); err != nil {
		log.Fatalf("stdout: %v", err)
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var req request
		var resp map[string]any
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			resp = map[string]any{"ok": false, "err": "bad request: " + err.Error()}
		} else {
			resp = n.serve(req)
		}
		if err := out.Encode(resp); err != nil {
			log.Fatalf("stdout: %v", err)
		}
	}
	log.Printf("end of input: closing")
}

// up starts the node and waits until it is Running with a Tailscale IP and a home DERP region.
func (n *node) up(ctx context.Context) (map[string]any, error) {
	st, err := n.srv.Up(ctx)
	if err != nil {
		return nil, err
	}
	lc, err := n.srv.LocalClient()
	if err != nil {
		return nil, err
	}
	for st.Self == nil || st.Self.Relay == "" || len(st.TailscaleIPs) == 0 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no home DERP region: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if st, err = lc.Status(ctx); err != nil {
			return nil, err
		}
	}
	return map[string]any{
		"version": tailscaleVersion(),
		"ip":      st.TailscaleIPs[0].String(),
		"key":     st.Self.PublicKey.String(),
		"relay":   st.Self.Relay,
	}, nil
}

// tailscaleVersion is the version of module tailscale.com this program was built with.
func tailscaleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, m := range bi.Deps {
		if m.Path == "tailscale.com" {
			return m.Version
		}
	}
	return "unknown"
}

// probe runs a disco ping, a TSMP ping and a send of 1 MiB together (the test's check that
// nothing passes, in one window instead of three).
func (n *node) probe(ctx context.Context, req request) map[string]any {
	var wg sync.WaitGroup
	var disco, tsmp, send map[string]any
	wg.Add(3)
	go func() {
		defer wg.Done()
		disco = n.ping(ctx, request{IP: req.IP, Type: "disco"})
	}()
	go func() {
		defer wg.Done()
		tsmp = n.ping(ctx, request{IP: req.IP, Type: "TSMP"})
	}()
	go func() {
		defer wg.Done()
		send = n.send(ctx, request{Addr: req.Addr, Bytes: 1 << 20, Seed: 99,
			StallMs: req.TimeoutMs})
	}()
	wg.Wait()
	return map[string]any{"ok": true, "disco": disco, "tsmp": tsmp, "send": send}
}

func (n *node) serve(req request) map[string]any {
	var ctx context.Context = context.Background()
	var cancel context.CancelFunc = func() {}
	if req.TimeoutMs > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
	}
	defer cancel()
	switch req.Op {
	case "status":
		return n.status(ctx)
	case "ping":
		return n.ping(ctx, req)
	case "send":
		return n.send(ctx, req)
	case "probe":
		return n.probe(ctx, req)
	case "received":
		n.mu.Lock()
		defer n.mu.Unlock()
		return map[string]any{"ok": true, "bytes": n.sinkBytes, "conns": n.sinkConns,
			"completed": n.sinkCompleted}
	}
	return map[string]any{"ok": false, "err": fmt.Sprintf("unknown op %q", req.Op)}
}

func fail(err error) map[string]any { return map[string]any{"ok": false, "err": err.Error()} }

func (n *node) status(ctx context.Context) map[string]any {
	lc, err := n.srv.LocalClient()
	if err != nil {
		return fail(err)
	}
	st, err := lc.Status(ctx)
	if err != nil {
		return fail(err)
	}
	peers := []peer{}
	for _, ps := range st.Peer {
		p := peer{Key: ps.PublicKey.String(), HostName: ps.HostName, CurAddr: ps.CurAddr,
			Relay: ps.Relay, Online: ps.Online, RxBytes: ps.RxBytes, TxBytes: ps.TxBytes,
			InEngine: ps.InEngine}
		for _, ip := range ps.TailscaleIPs {
			p.IPs = append(p.IPs, ip.String())
		}
		if !ps.LastWrite.IsZero() {
			p.LastWrite = ps.LastWrite.UTC().Format(time.RFC3339Nano)
		}
		peers = append(peers, p)
	}
	return map[string]any{"ok": true, "backend": st.BackendState, "relay": st.Self.Relay,
		"peers": peers}
}

func (n *node) ping(ctx context.Context, req request) map[string]any {
	ip, err := netip.ParseAddr(req.IP)
	if err != nil {
		return fail(err)
	}
	var pt tailcfg.PingType
	switch strings.ToLower(req.Type) {
	case "disco":
		pt = tailcfg.PingDisco
	case "tsmp":
		pt = tailcfg.PingTSMP
	default:
		return fail(fmt.Errorf("ping type %q: want disco or TSMP", req.Type))
	}
	lc, err := n.srv.LocalClient()
	if err != nil {
		return fail(err)
	}
	res, err := lc.Ping(ctx, ip, pt)
	if err != nil {
		return fail(err)
	}
	if res.Err != "" {
		return map[string]any{"ok": false, "err": res.Err, "result": res}
	}
	return map[string]any{"ok": true, "result": res}
}

// stream is the sender's data: ChaCha8 output for a seed, the same in every build.
type stream struct{ r *rand.ChaCha8 }

func (s stream) fill(b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], s.r.Uint64())
	}
}

func (n *node) send(ctx context.Context, req request) map[string]any {
	stall := time.Duration(req.StallMs) * time.Millisecond
	if stall <= 0 {
		stall = time.Minute
	}
	start := time.Now()
	dctx, dcancel := context.WithTimeout(ctx, stall)
	c, err := n.srv.Dial(dctx, "tcp", req.Addr)
	dcancel()
	if err != nil {
		return fail(fmt.Errorf("dial %s: %w", req.Addr, err))
	}
	defer c.Close()
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], req.Seed)
	src := stream{rand.NewChaCha8(seed)}
	h := sha256.New()
	buf := make([]byte, 64<<10)
	var sent int64
	for sent < req.Bytes {
		chunk := buf[:min(int64(len(buf)), req.Bytes-sent)]
		src.fill(buf)
		h.Write(chunk)
		c.SetWriteDeadline(time.Now().Add(stall)) // a bound on no progress, not on the total
		w, err := c.Write(chunk)
		sent += int64(w)
		if err != nil {
			return map[string]any{"ok": false, "err": "write: " + err.Error(), "sent": sent}
		}
	}
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return fail(errors.New("the tailnet connection has no CloseWrite"))
	}
	if err := cw.CloseWrite(); err != nil {
		return fail(fmt.Errorf("close write: %w", err))
	}
	c.SetReadDeadline(time.Now().Add(stall))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return map[string]any{"ok": false, "err": "reading the sink's answer: " + err.Error(),
			"sent": sent}
	}
	var peerBytes int64
	var peerSum string
	if _, err := fmt.Sscanf(line, "%d %s", &peerBytes, &peerSum); err != nil {
		return fail(fmt.Errorf("the sink's answer %q: %v", line, err))
	}
	return map[string]any{"ok": true, "sent": sent, "sha256": hex.EncodeToString(h.Sum(nil)),
		"peer_bytes": peerBytes, "peer_sha256": peerSum,
		"seconds": time.Since(start).Seconds()}
}

// sink answers every connection with the length and SHA-256 of what it read.
func (n *node) sink(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Printf("sink: %v", err)
			return
		}
		n.mu.Lock()
		n.sinkConns++
		n.mu.Unlock()
		go func() {
			defer c.Close()
			h := sha256.New()
			buf := make([]byte, 64<<10)
			var total int64
			for {
				r, err := c.Read(buf)
				h.Write(buf[:r])
				total += int64(r)
				n.mu.Lock()
				n.sinkBytes += int64(r)
				n.mu.Unlock()
				if err == io.EOF {
					break
				}
				if err != nil {
					log.Printf("sink: read after %d bytes: %v", total, err)
					return
				}
			}
			fmt.Fprintf(c, "%d %s\n", total, hex.EncodeToString(h.Sum(nil)))
			n.mu.Lock()
			n.sinkCompleted++
			n.mu.Unlock()
		}()
	}
}
