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

// ping sends ICMP echo requests to dst every 200 ms until one is answered (true) or the deadline
// passes. A reader takes every reply (requests staged during a handshake are answered late: any
// echo reply proves the path).
func (p *peer) ping(dst *peer, within time.Duration) bool {
	c, err := p.net.DialPingAddr(p.ip, dst.ip)
	if err != nil {
		fail("%s: ping socket: %v", p.name, err)
	}
	defer c.Close()
	got := make(chan struct{}, 1)
	go func() {
		buf := make([]byte, 1500)
		c.SetReadDeadline(time.Now().Add(within))
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			if n >= 8 && buf[0] == 0 {
				got <- struct{}{}
				return
			}
		}
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for seq := 1; ; seq++ {
		if _, err := c.Write(icmpEcho(uint16(seq), []byte("hderp-wgrelay"))); err != nil {
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

func icmpEcho(seq uint16, data []byte) []byte {
	b := make([]byte, 8+len(data))
	b[0] = 8 // echo request
	b[4], b[5] = 0x12, 0x34
	b[6], b[7] = byte(seq>>8), byte(seq)
	copy(b[8:], data)
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	cs := ^uint16(sum)
	b[2], b[3] = byte(cs>>8), byte(cs)
	return b
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
