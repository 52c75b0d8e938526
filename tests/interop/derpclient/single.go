package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"tailscale.com/derp"
	"tailscale.com/derp/derphttp"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
)

// singleChecks: one hderp-server (plain, TLS or WebSocket), as a Tailscale node sees it.
func singleChecks(e *env) []check {
	cs := []check{
		{"login-server-info", checkLogin},
		{"packets-10000-in-order", checkPackets},
		{"packets-edge-sizes", checkPacketSizes},
		{"http-generate-204-and-probe", checkHTTPEndpoints},
		{"ping-pong", checkPing},
		{"keepalive", checkKeepAlive},
		{"peergone-not-here", checkNotHere},
		{"peergone-disconnected", checkGoneDisconnected},
		{"closepeer-mesh-key", checkClosePeer},
		{"duplicate-key-connections", checkDupKey},
		{"closepeer-refused-without-mesh-key", checkClosePeerRefused},
		{"note-preferred", checkPreferred},
		{"client-info-every-field", checkClientInfo},
	}
	if e.tls && !e.ws { // the WebSocket dial ignores the DERP map's TLS settings
		cs = append(cs, check{"tls-verified-and-insecure-for-tests", checkTLSVerify},
			check{"meta-cert-fast-start", checkMetaCert})
	}
	// Over WebSocket derphttp sends no WatchConns (its WebSocket path skips it) and dials the
	// region's first node only (no Ideal-Node header).
	if !e.ws {
		cs = append(cs, check{"watchconns-mesh-key", checkWatch},
			check{"watchconns-refused-without-mesh-key", checkWatchRefused},
			check{"peerpresent-not-ideal", checkNotIdeal})
	}
	return cs
}

// pairOn: A (named nameA) on urlA and B on urlB, each having reached the other once. A
// client's Connect returns before the server has taken its login (with the fast start it has
// not even read it): a packet sent to it at once may find nobody, with derper as with hderp
// (and across a mesh, until the link told the other node). Tailscale's disco resends; the
// checks send the first packet again until it arrives.
func (e *env) pairOn(nameA, urlA, nameB, urlB string) (*peer, *peer, error) {
	a, err := e.dial(nameA, urlA, nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := e.dial(nameB, urlB, nil)
	if err != nil {
		a.close()
		return nil, nil, err
	}
	if err := reachBoth(a, b); err != nil {
		closeAll(a, b)
		return nil, nil, err
	}
	return a, b, nil
}

// pair: A and B on url (pairOn).
func (e *env) pair() (*peer, *peer, error) {
	return e.pairOn("A", e.url, "B", e.url)
}

// withPair runs f on e.pair(), both closed after it.
func (e *env) withPair(f func(a, b *peer) error) error {
	a, b, err := e.pair()
	if err != nil {
		return err
	}
	defer closeAll(a, b)
	return f(a, b)
}

// withPeer runs f on a client A logged in to url, closed after it.
func (e *env) withPeer(f func(a *peer) error) error {
	a, err := e.dial("A", e.url, nil)
	if err != nil {
		return err
	}
	defer a.close()
	return f(a)
}

// The server greets with its key (checked by derp.NewClient) and sends ServerInfo first.
// With -ws the connection is a WebSocket one (the server counts it).
func checkLogin(e *env) error {
	ws0, err := e.varz("derp_websocket_accepts")
	if err != nil {
		return err
	}
	return e.withPeer(func(a *peer) error {
		if ws, err := e.varz("derp_websocket_accepts"); err != nil || (ws > ws0) != e.ws {
			return fmt.Errorf("derp_websocket_accepts %d -> %d (%v) with -ws=%v", ws0, ws, err,
				e.ws)
		}
		if a.c.ServerPublicKey().IsZero() {
			return fmt.Errorf("no server key")
		}
		m, err := a.expect("first message", func(derp.ReceivedMessage) bool { return true })
		if err != nil {
			return err
		}
		if _, ok := m.(derp.ServerInfoMessage); !ok {
			return fmt.Errorf("first message %T, want derp.ServerInfoMessage", m)
		}
		return nil
	})
}

func checkPackets(e *env) error {
	return e.withPair(func(a, b *peer) error { return transfer(a, b, 10000) })
}

// derphttp.Client.Ping: a ping frame, answered by the server's pong (matched in Recv).
func checkPing(e *env) error {
	return e.withPeer(func(a *peer) error {
		for i := 0; i < 20; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), waitS)
			err := a.c.Ping(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("ping %d: %w", i, err)
			}
		}
		return nil
	})
}

// The server's KeepAlive frames (interop.py starts it with --keepalive-interval 1s).
func checkKeepAlive(e *env) error {
	return e.withPeer(func(a *peer) error {
		_, err := a.expect("KeepAlive", func(m derp.ReceivedMessage) bool {
			_, ok := m.(derp.KeepAliveMessage)
			return ok
		})
		return err
	})
}

// A disco packet to a key nobody holds: PeerGone "not here".
func checkNotHere(e *env) error {
	return e.withPeer(func(a *peer) error {
		nobody := key.NewNode().Public()
		if err := a.c.Send(nobody, discoLike()); err != nil {
			return err
		}
		_, err := a.expect("PeerGone(not here)", peerGone(nobody, derp.PeerGoneReasonNotHere))
		return err
	})
}

// A sends to B; A leaves: B, which got packets from A, is told PeerGone "disconnected".
func checkGoneDisconnected(e *env) error {
	return e.withPair(func(a, b *peer) error {
		if err := a.c.Send(b.pub(), []byte("hello")); err != nil {
			return err
		}
		if _, err := b.expect("packet from A", packetFrom(a.pub(), []byte("hello"))); err != nil {
			return err
		}
		a.close()
		_, err := b.expect("PeerGone(disconnected)",
			peerGone(a.pub(), derp.PeerGoneReasonDisconnected))
		return err
	})
}

// presentAs waits for w to report k present with exactly flags (and, when addr is valid,
// from that client address).
func presentAs(w *peer, who string, k key.NodePublic, flags derp.PeerPresentFlags,
	p *peer) error {
	m, err := w.expect("PeerPresent("+who+")", peerPresent(k))
	if err != nil {
		return err
	}
	pp := m.(derp.PeerPresentMessage)
	if pp.Flags != flags {
		return fmt.Errorf("PeerPresent(%s) flags %#x, want %#x", who, pp.Flags, flags)
	}
	if p != nil {
		la, err := p.c.LocalAddr()
		if err != nil {
			return fmt.Errorf("%s: LocalAddr: %w", who, err)
		}
		if pp.IPPort != la {
			return fmt.Errorf("PeerPresent(%s) IPPort %v, want the client's address %v", who,
				pp.IPPort, la)
		}
	}
	return nil
}

func (e *env) watcher(url string) (*peer, error) {
	return e.dial("W", url, func(c *derphttp.Client) {
		c.MeshKey, c.WatchConnectionChanges = e.meshKey, true
	})
}

// A mesh watcher sees those already there, newcomers (regular, prober, mesh peer) with their
// flags and addresses, and PeerGone when one leaves.
func checkWatch(e *env) error {
	a, err := e.dial("A", e.url, nil)
	if err != nil {
		return err
	}
	defer a.close()
	w, err := e.watcher(e.url)
	if err != nil {
		return err
	}
	defer w.close()
	err = presentAs(w, "A, there before", a.pub(), derp.PeerPresentIsRegular, a)
	if err != nil {
		return err
	}
	pr, err := e.dial("P", e.url, func(c *derphttp.Client) { c.IsProber = true })
	if err != nil {
		return err
	}
	defer pr.close()
	if err := presentAs(w, "prober", pr.pub(), derp.PeerPresentIsProber, pr); err != nil {
		return err
	}
	m, err := e.dial("M", e.url, func(c *derphttp.Client) { c.MeshKey = e.meshKey })
	if err != nil {
		return err
	}
	defer m.close()
	if err := presentAs(w, "mesh peer", m.pub(), derp.PeerPresentIsMeshPeer, m); err != nil {
		return err
	}
	pr.close()
	_, err = w.expect("PeerGone(prober)", peerGone(pr.pub(), derp.PeerGoneReasonDisconnected))
	return err
}

// WatchConns without the mesh key: the server refuses by closing the connection.
func checkWatchRefused(e *env) error {
	w, err := e.dial("W", e.url, func(c *derphttp.Client) { c.WatchConnectionChanges = true })
	if err != nil {
		return err // the login itself is fine: the server refuses the WatchConns frame after it
	}
	defer w.close()
	return w.expectClosed("close after an unauthorised WatchConns")
}

// ClosePeer from a mesh client closes B's connection; a watcher sees B gone.
func checkClosePeer(e *env) error {
	b, err := e.dial("B", e.url, nil)
	if err != nil {
		return err
	}
	defer b.close()
	m, err := e.dial("M", e.url, func(c *derphttp.Client) {
		c.MeshKey, c.WatchConnectionChanges = e.meshKey, !e.ws
	})
	if err != nil {
		return err
	}
	defer m.close()
	if err := reachBoth(m, b); err != nil { // B's login has been taken
		return err
	}
	if err := m.c.ClosePeer(b.pub()); err != nil {
		return err
	}
	if err := b.expectClosed("close by ClosePeer"); err != nil {
		return err
	}
	_, err = m.expect("PeerGone(B)", peerGone(b.pub(), derp.PeerGoneReasonDisconnected))
	return err
}

// ClosePeer without the mesh key: the asker is closed, B stays (a packet sent after the
// asker's close still reaches B).
func checkClosePeerRefused(e *env) error {
	return e.withPair(func(a, b *peer) error {
		if err := a.c.ClosePeer(b.pub()); err != nil {
			return fmt.Errorf("ClosePeer: %w", err)
		}
		if err := a.expectClosed("close after an unauthorised ClosePeer"); err != nil {
			return err
		}
		c, err := e.dial("C", e.url, nil)
		if err != nil {
			return err
		}
		defer c.close()
		if err := c.c.Send(b.pub(), []byte("still here?")); err != nil {
			return err
		}
		_, err = b.expect("packet after the refused ClosePeer",
			packetFrom(c.pub(), []byte("still here?")))
		return err
	})
}

// NotePreferred(true) makes the connection a home connection (derper's gauge
// derp_current_home_connections, in hderp's /debug/varz too); closing it ends that.
func checkPreferred(e *env) error {
	if e.varzURL == "" {
		return fmt.Errorf("no -varz URL")
	}
	h0, err := e.varz("derp_current_home_connections")
	if err != nil {
		return err
	}
	return e.withPeer(func(a *peer) error {
		a.c.NotePreferred(true)
		if err := e.waitVarz("derp_current_home_connections", h0+1); err != nil {
			return err
		}
		a.c.NotePreferred(false)
		if err := e.waitVarz("derp_current_home_connections", h0); err != nil {
			return fmt.Errorf("after NotePreferred(false): %w", err)
		}
		a.c.NotePreferred(true)
		if err := e.waitVarz("derp_current_home_connections", h0+1); err != nil {
			return err
		}
		a.close()
		return e.waitVarz("derp_current_home_connections", h0)
	})
}

func (e *env) varz(name string) (int64, error) {
	r, err := e.httpClient().Get(e.varzURL)
	if err != nil {
		return 0, err
	}
	defer r.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(r.Body)
	for _, line := range bytes.Split(buf.Bytes(), []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 2 && string(f[0]) == name {
			return strconv.ParseInt(string(f[1]), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no series %s", e.varzURL, name)
}

func (e *env) waitVarz(name string, want int64) error {
	deadline := time.Now().Add(waitS)
	for {
		v, err := e.varz(name)
		if err == nil && v == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s = %d (err %v), want %d", name, v, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TLS is verified for real: without the test CA (derphttp's TLSConfig.RootCAs, extra roots
// after the system's) the certificate is refused; the DERP map's InsecureForTests accepts it;
// with the CA it verifies.
func checkTLSVerify(e *env) error {
	port, _ := strconv.Atoi(e.port)
	node := func(insecure bool) *tailcfg.DERPRegion {
		return &tailcfg.DERPRegion{RegionID: 900, RegionCode: "t", Nodes: []*tailcfg.DERPNode{{
			Name: "900a", RegionID: 900, HostName: "localhost", IPv4: "127.0.0.1", IPv6: "none",
			DERPPort: port, STUNPort: -1, InsecureForTests: insecure}}}
	}
	noCA := func(c *derphttp.Client) { c.TLSConfig = nil }
	if p, err := e.dialRegion("no-CA", node(false), noCA); err == nil {
		p.close()
		return fmt.Errorf("a certificate of the test CA verified without the CA")
	} else if !strings.Contains(err.Error(), "certificate") {
		return fmt.Errorf("without the CA: %v, want a certificate error", err)
	}
	p, err := e.dialRegion("insecure", node(true), noCA)
	if err != nil {
		return fmt.Errorf("InsecureForTests: %w", err)
	}
	defer p.close()
	v, err := e.dialRegion("verified", node(false), nil)
	if err != nil {
		return fmt.Errorf("against the test CA: %w", err)
	}
	defer v.close()
	return reachBoth(p, v)
}

// The meta certificate (CN derpkey<hex>, serial = protocol version) in the TLS 1.3 chain lets
// the client skip the HTTP response (Derp-Fast-Start: 1): a server that still sent its 101
// would break the framing, so packets flowing on such a connection show the fast start held.
func checkMetaCert(e *env) error {
	return e.withPair(metaCertOn)
}

func metaCertOn(a, b *peer) error {
	cs, ok := a.c.TLSConnectionState()
	if !ok {
		return fmt.Errorf("no TLS state")
	}
	if cs.Version != tls.VersionTLS13 {
		return fmt.Errorf("TLS version %#x, want 1.3", cs.Version)
	}
	pub, ver := metaCert(cs)
	if pub.IsZero() {
		return fmt.Errorf("no meta certificate in the chain (%d certificates)", len(cs.PeerCertificates))
	}
	if pub != a.c.ServerPublicKey() {
		return fmt.Errorf("meta certificate key %v, server key %v", pub, a.c.ServerPublicKey())
	}
	if ver != derp.ProtocolVersion {
		return fmt.Errorf("meta certificate protocol version %d, want %d", ver, derp.ProtocolVersion)
	}
	return transfer(a, b, 100)
}

// A region client that had to skip the region's first node says so (Ideal-Node header): the
// watcher sees it with the NotIdeal flag.
func checkNotIdeal(e *env) error {
	port, _ := strconv.Atoi(e.port)
	dead, closeDead, err := deadPort()
	if err != nil {
		return err
	}
	defer closeDead()
	reg := &tailcfg.DERPRegion{RegionID: 900, RegionCode: "t", Nodes: []*tailcfg.DERPNode{
		{Name: "900a", RegionID: 900, HostName: "localhost", IPv4: "127.0.0.1", IPv6: "none",
			DERPPort: dead, STUNPort: -1},
		{Name: "900b", RegionID: 900, HostName: "localhost", IPv4: "127.0.0.1", IPv6: "none",
			DERPPort: port, STUNPort: -1},
	}}
	w, err := e.watcher(e.url)
	if err != nil {
		return err
	}
	defer w.close()
	n, err := e.dialRegion("N", reg, nil)
	if err != nil {
		return err
	}
	defer n.close()
	return presentAs(w, "second node of the map", n.pub(), derp.PeerPresentNotIdeal, n)
}

// deadPort: a loopback TCP port bound but not listening (connections to it are refused, and
// nobody else is given it) until the returned func closes it.
func deadPort() (int, func(), error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, nil, err
	}
	closeFd := func() { syscall.Close(fd) }
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		closeFd()
		return 0, nil, err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		closeFd()
		return 0, nil, err
	}
	return sa.(*syscall.SockaddrInet4).Port, closeFd, nil
}

// Two connections with one node key (a node reconnecting before its old connection is gone):
// both stay open, one receives: the newest, then the one that last sent, and when it leaves the
// other (derper's lastWriterIsActive). The server delivers each packet to one connection, so the
// one that gets a tagged packet is the active one.
func checkDupKey(e *env) error {
	b, err := e.dial("B", e.url, nil)
	if err != nil {
		return err
	}
	defer b.close()
	priv := key.NewNode()
	k1, err := e.dialKey("K1", e.url, priv, nil)
	if err != nil {
		return err
	}
	defer k1.close()
	if err := reachBoth(b, k1); err != nil {
		return err
	}
	k2, err := e.dialKey("K2", e.url, priv, nil)
	if err != nil {
		return err
	}
	defer k2.close()
	// K2's login taken: it is the active one and gets what B sends.
	if err := reachWith(b, k2, []byte("to the newest")); err != nil {
		return fmt.Errorf("the newest connection: %w", err)
	}
	if err := reachWith(k1, b, []byte("K1 speaks")); err != nil {
		return err
	}
	if err := b.c.Send(priv.Public(), []byte("to the last writer")); err != nil {
		return err
	}
	if _, err := k1.expect("packet for the last writer", packetFrom(b.pub(),
		[]byte("to the last writer"))); err != nil {
		return err
	}
	k1.close()
	if err := reachWith(b, k2, []byte("to the one left")); err != nil {
		return fmt.Errorf("after the active one left: %w", err)
	}
	return nil
}
