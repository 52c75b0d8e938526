package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"tailscale.com/derp"
	"tailscale.com/derp/derphttp"
	"tailscale.com/net/netmon"
	"tailscale.com/tailcfg"
	"tailscale.com/types/key"
)

// peer is one derphttp.Client with a goroutine receiving from it (Ping needs a concurrent
// Recv: pongs are matched there). Packets are copied (Recv's may alias the client's buffer).
// The pump stops at the first Recv error, which errc then holds (derphttp would reconnect on
// the next Recv; the checks want to see the close).
type peer struct {
	name string
	priv key.NodePrivate
	c    *derphttp.Client
	msgs chan derp.ReceivedMessage
	errc chan error
}

func (p *peer) pub() key.NodePublic { return p.priv.Public() }

// dial connects a client to url (configured by opt first) and starts its pump.
func (e *env) dial(name, url string, opt func(*derphttp.Client)) (*peer, error) {
	return e.dialKey(name, url, key.NewNode(), opt)
}

// dialKey: dial with a given node key (a second connection of one node).
func (e *env) dialKey(name, url string, priv key.NodePrivate, opt func(*derphttp.Client)) (
	*peer, error) {
	c, err := derphttp.NewClient(priv, url, e.logf, netmon.NewStatic())
	if err != nil {
		return nil, err
	}
	return e.start(name, priv, c, opt)
}

// dialRegion connects a client through a DERP map region (the way tailscaled dials).
func (e *env) dialRegion(name string, reg *tailcfg.DERPRegion, opt func(*derphttp.Client)) (
	*peer, error) {
	priv := key.NewNode()
	c := derphttp.NewRegionClient(priv, e.logf, netmon.NewStatic(),
		func() *tailcfg.DERPRegion { return reg })
	return e.start(name, priv, c, opt)
}

func (e *env) start(name string, priv key.NodePrivate, c *derphttp.Client,
	opt func(*derphttp.Client)) (*peer, error) {
	if e.roots != nil { // TLS: the test CA, as extra roots after the system's
		c.TLSConfig = &tls.Config{RootCAs: e.roots}
	}
	if opt != nil {
		opt(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitS)
	defer cancel()
	if err := c.Connect(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	p := &peer{name: name, priv: priv, c: c, msgs: make(chan derp.ReceivedMessage, 4096),
		errc: make(chan error, 1)}
	go p.pump()
	return p, nil
}

func (p *peer) pump() {
	for {
		m, err := p.c.Recv()
		if err != nil {
			p.errc <- err
			close(p.msgs)
			return
		}
		if rp, ok := m.(derp.ReceivedPacket); ok {
			rp.Data = bytes.Clone(rp.Data)
			m = rp
		}
		p.msgs <- m
	}
}

func (p *peer) close() { p.c.Close() }

func closeAll(ps ...*peer) {
	for _, p := range ps {
		if p != nil {
			p.close()
		}
	}
}

var errClosed = errors.New("connection closed")

// expect reads p's messages until match accepts one (others are dropped) and returns it;
// an error when p's connection ends first or nothing matched within waitS.
func (p *peer) expect(what string, match func(derp.ReceivedMessage) bool) (
	derp.ReceivedMessage, error) {
	deadline := time.NewTimer(waitS)
	defer deadline.Stop()
	for {
		select {
		case m, ok := <-p.msgs:
			if !ok {
				return nil, fmt.Errorf("%s: %s: %w (%v)", p.name, what, errClosed, <-p.errc)
			}
			if match(m) {
				return m, nil
			}
		case <-deadline.C:
			return nil, fmt.Errorf("%s: no %s within %v", p.name, what, waitS)
		}
	}
}

// expectClosed waits for p's connection to end (the server closed it).
func (p *peer) expectClosed(what string) error {
	_, err := p.expect(what, func(derp.ReceivedMessage) bool { return false })
	if errors.Is(err, errClosed) {
		return nil
	}
	return err
}

func packetFrom(src key.NodePublic, body []byte) func(derp.ReceivedMessage) bool {
	return func(m derp.ReceivedMessage) bool {
		rp, ok := m.(derp.ReceivedPacket)
		return ok && rp.Source == src && (body == nil || bytes.Equal(rp.Data, body))
	}
}

func peerGone(k key.NodePublic, r derp.PeerGoneReasonType) func(derp.ReceivedMessage) bool {
	return func(m derp.ReceivedMessage) bool {
		g, ok := m.(derp.PeerGoneMessage)
		return ok && g.Peer == k && g.Reason == r
	}
}

func peerPresent(k key.NodePublic) func(derp.ReceivedMessage) bool {
	return func(m derp.ReceivedMessage) bool {
		pp, ok := m.(derp.PeerPresentMessage)
		return ok && pp.Key == k
	}
}

// Packets of transfer: seq (8 bytes BE) then a filler that depends on seq, 16..1400 bytes
// long; an ack is "ACK" and the highest seq received.
func testPacket(seq uint64) []byte {
	n := 16 + int(seq*37%1385)
	b := make([]byte, n)
	binary.BigEndian.PutUint64(b, seq)
	for i := 8; i < n; i++ {
		b[i] = byte(seq*7 + uint64(i))
	}
	return b
}

var ackTag = []byte("ACK")

const (
	ackEvery = 8
	window   = 16 // below derper's per-client queue (32): nothing a correct server may drop
)

// transfer sends n packets from a to b with at most window unacknowledged; b checks each
// arrives once, in order, intact, and acks every ackEvery-th. Both directions go through
// the servers. Only that pair's packets count: other messages (KeepAlive, ServerInfo) pass.
func transfer(a, b *peer, n uint64) error {
	errc := make(chan error, 1)
	go func() { errc <- receiveInOrder(a, b, n) }()
	acked := uint64(0)
	for seq := uint64(0); seq < n; seq++ {
		for seq-acked >= window {
			m, err := a.expect("ack", func(m derp.ReceivedMessage) bool {
				rp, ok := m.(derp.ReceivedPacket)
				return ok && rp.Source == b.pub() && bytes.HasPrefix(rp.Data, ackTag)
			})
			if err != nil {
				return fmt.Errorf("after %d sent, %d acked: %w (receiver: %v)", seq, acked,
					err, pollErr(errc))
			}
			acked = binary.BigEndian.Uint64(m.(derp.ReceivedPacket).Data[3:]) + 1
		}
		if err := a.c.Send(b.pub(), testPacket(seq)); err != nil {
			return fmt.Errorf("send %d: %w", seq, err)
		}
	}
	return <-errc
}

func pollErr(c chan error) error {
	select {
	case err := <-c:
		return err
	default:
		return nil
	}
}

func receiveInOrder(a, b *peer, n uint64) error {
	for want := uint64(0); want < n; want++ {
		m, err := b.expect(fmt.Sprintf("packet %d", want), func(m derp.ReceivedMessage) bool {
			rp, ok := m.(derp.ReceivedPacket)
			return ok && rp.Source == a.pub() && !bytes.HasPrefix(rp.Data, reachTag) &&
				!bytes.HasPrefix(rp.Data, ackTag) // late ones of an earlier transfer
		})
		if err != nil {
			return err
		}
		got := m.(derp.ReceivedPacket).Data
		if len(got) < 8 {
			return fmt.Errorf("packet %d: %d bytes", want, len(got))
		}
		if seq := binary.BigEndian.Uint64(got); seq != want {
			return fmt.Errorf("packet %d out of order: got seq %d", want, seq)
		}
		if !bytes.Equal(got, testPacket(want)) {
			return fmt.Errorf("packet %d: content differs (%d bytes)", want, len(got))
		}
		if (want+1)%ackEvery == 0 || want+1 == n {
			ack := binary.BigEndian.AppendUint64(bytes.Clone(ackTag), want)
			if err := b.c.Send(a.pub(), ack); err != nil {
				return fmt.Errorf("ack %d: %w", want, err)
			}
		}
	}
	return nil
}

// discoLike is a packet the relay sees as disco (magic, a sender key, a nonce): derper answers
// only those with "not here" PeerGone.
func discoLike() []byte {
	b := make([]byte, 6+32+24+16)
	copy(b, "TS\xf0\x9f\x92\xac")
	for i := 6; i < len(b); i++ {
		b[i] = byte(i)
	}
	return b
}

// reachTag starts the packets reach sends (resent until one arrives: a late copy may follow).
var reachTag = []byte("REACH")

// reach sends a packet from a to b until one arrives (see pair).
func reach(a, b *peer) error {
	return reachWith(a, b, append(bytes.Clone(reachTag), a.name+" to "+b.name...))
}

// reachWith: reach with a given body.
func reachWith(a, b *peer, body []byte) error {
	deadline := time.Now().Add(waitS)
	for time.Now().Before(deadline) {
		if err := a.c.Send(b.pub(), body); err != nil {
			return err
		}
		t := time.NewTimer(200 * time.Millisecond)
	wait:
		for {
			select {
			case m, ok := <-b.msgs:
				if !ok {
					t.Stop()
					return fmt.Errorf("%s: closed (%v)", b.name, <-b.errc)
				}
				if packetFrom(a.pub(), body)(m) {
					t.Stop()
					return nil
				}
			case <-t.C:
				break wait
			}
		}
	}
	return fmt.Errorf("no packet from %s reached %s within %v", a.name, b.name, waitS)
}

func reachBoth(a, b *peer) error {
	if err := reach(a, b); err != nil {
		return err
	}
	return reach(b, a)
}
