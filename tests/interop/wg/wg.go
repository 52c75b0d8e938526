package main

// wireguard-go peers on gVisor's netstack (no TUN device, no privileges): each with its own
// UDP socket (conn.NewDefaultBind), wrapped to record the last transport packet it sent.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/curve25519"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun/netstack"
)

type key [32]byte

func newKey() (priv, pub key) {
	if _, err := rand.Read(priv[:]); err != nil {
		panic(err)
	}
	priv[0] &= 248
	priv[31] = (priv[31] & 127) | 64
	p, err := curve25519.X25519(priv[:], curve25519.Basepoint)
	if err != nil {
		panic(err)
	}
	copy(pub[:], p)
	return
}

func (k key) b64() string { return base64.StdEncoding.EncodeToString(k[:]) }
func (k key) hex() string { return hex.EncodeToString(k[:]) }

// tapBind is the default bind, keeping a copy of the last data message (type 4) sent.
type tapBind struct {
	conn.Bind
	mu       sync.Mutex
	lastData []byte
}

func (b *tapBind) Send(bufs [][]byte, ep conn.Endpoint) error {
	for _, p := range bufs {
		if len(p) >= 32 && p[0] == 4 {
			b.mu.Lock()
			b.lastData = append(b.lastData[:0], p...)
			b.mu.Unlock()
		}
	}
	return b.Bind.Send(bufs, ep)
}

func (b *tapBind) last() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]byte(nil), b.lastData...)
}

type peer struct {
	name      string
	priv, pub key
	ip        netip.Addr
	dev       *device.Device
	net       *netstack.Net
	bind      *tapBind
}

func newPeer(name string, ip string) *peer {
	p := &peer{name: name, ip: netip.MustParseAddr(ip)}
	p.priv, p.pub = newKey()
	return p
}

// up starts the device with the given peers: endpoint is the relay for each; keepalive 0: none.
func (p *peer) up(relay netip.AddrPort, others []*peer, keepalive int) {
	tun, tnet, err := netstack.CreateNetTUN([]netip.Addr{p.ip}, nil, 1420)
	if err != nil {
		fail("%s: netstack: %v", p.name, err)
	}
	p.net = tnet
	p.bind = &tapBind{Bind: conn.NewDefaultBind()}
	lvl := device.LogLevelError
	if os.Getenv("WGTEST_VERBOSE") != "" {
		lvl = device.LogLevelVerbose
	}
	p.dev = device.NewDevice(tun, p.bind, device.NewLogger(lvl, p.name+": "))
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "private_key=%s\n", p.priv.hex())
	for _, o := range others {
		fmt.Fprintf(&cfg, "public_key=%s\nendpoint=%s\nallowed_ip=%s/32\n", o.pub.hex(), relay,
			o.ip)
		if keepalive > 0 {
			fmt.Fprintf(&cfg, "persistent_keepalive_interval=%d\n", keepalive)
		}
	}
	if err := p.dev.IpcSet(cfg.String()); err != nil {
		fail("%s: config: %v", p.name, err)
	}
	if err := p.dev.Up(); err != nil {
		fail("%s: up: %v", p.name, err)
	}
	p.echo()
}

// rebind moves the device to a new UDP source port (what a NAT rebinding looks like).
func (p *peer) rebind() uint16 {
	before := p.port()
	if err := p.dev.IpcSet("listen_port=0\n"); err != nil {
		fail("%s: rebind: %v", p.name, err)
	}
	after := p.port()
	if after == before {
		fail("%s: rebind kept port %d", p.name, before)
	}
	return after
}

func (p *peer) port() uint16 {
	s, err := p.dev.IpcGet()
	if err != nil {
		fail("%s: %v", p.name, err)
	}
	for _, l := range strings.Split(s, "\n") {
		var v uint16
		if _, err := fmt.Sscanf(l, "listen_port=%d", &v); err == nil {
			return v
		}
	}
	return 0
}

// handshakes returns the last handshake time (unix seconds) per peer public key (hex).
func (p *peer) handshakes() map[string]int64 {
	s, err := p.dev.IpcGet()
	if err != nil {
		fail("%s: %v", p.name, err)
	}
	out := map[string]int64{}
	cur := ""
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, "public_key="); ok {
			cur = v
		}
		var t int64
		if _, err := fmt.Sscanf(l, "last_handshake_time_sec=%d", &t); err == nil && cur != "" {
			out[cur] = t
		}
	}
	return out
}

// echoPort: every peer's netstack answers UDP datagrams to this port with the same bytes (up
// starts the responder), which ping uses to prove a path through the relay.
const echoPort = 7

// echo answers every datagram on the peer's echo port until the socket fails.
func (p *peer) echo() {
	l, err := p.net.ListenUDPAddrPort(netip.AddrPortFrom(p.ip, echoPort))
	if err != nil {
		fail("%s: echo socket: %v", p.name, err)
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := l.ReadFrom(buf)
			if err != nil {
				return
			}
			l.WriteTo(buf[:n], from)
		}
	}()
}

// ping sends a UDP datagram to dst's echo responder every 200 ms until one comes back (true) or
// the deadline passes. A reader takes every answer (datagrams staged during a handshake are
// answered late: any answer proves the path). Not ICMP: netstack's ping socket (PingConn) waits
// for a wake-up before it reads, and its stack wakes a reader only when a reply lands in an
// empty queue, so a reply that arrives before the reader waits (a busy machine) is never read,
// nor any after it; gonet's UDP socket reads first and then waits.
func (p *peer) ping(dst *peer, within time.Duration) bool {
	c, err := p.net.DialUDPAddrPort(netip.AddrPortFrom(p.ip, 0),
		netip.AddrPortFrom(dst.ip, echoPort))
	if err != nil {
		fail("%s: ping socket: %v", p.name, err)
	}
	defer c.Close()
	probe := []byte("hderp-wgrelay " + p.name + " -> " + dst.name)
	c.SetReadDeadline(time.Now().Add(within))
	got := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 1500)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == string(probe) {
				got <- struct{}{}
				return
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for {
		if _, err := c.Write(probe); err != nil {
			fail("%s: ping write: %v", p.name, err)
		}
		select {
		case <-got:
			return true
		case <-deadline:
			return false
		case <-tick.C:
		}
	}
}

func (p *peer) listenTCP(port int) net.Listener {
	l, err := p.net.ListenTCP(&net.TCPAddr{IP: p.ip.AsSlice(), Port: port})
	if err != nil {
		fail("%s: listen: %v", p.name, err)
	}
	return l
}

func (p *peer) dialTCP(dst *peer, port int) net.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := p.net.DialContextTCPAddrPort(ctx, netip.AddrPortFrom(dst.ip, uint16(port)))
	if err != nil {
		fail("%s: dial %s: %v", p.name, dst.name, err)
	}
	return c
}
