// Command wg tests hderp-wgrelay with real WireGuard: wireguard-go peers on gVisor's netstack
// whose Endpoint is the relay. Usage: go run . -relay <path to hderp-wgrelay> [-shards N]
// [-cookies]
//
// Steps: two peers a and b (allowed to each other) meet through the relay and ping (a UDP echo,
// wg.go); a 64 MiB TCP transfer with a SHA-256 checks every byte, and a changes its UDP source
// port in the middle of it (roaming); a third registered peer c that a and b do not allow
// cannot reach a; an unregistered peer u cannot either; hostile datagrams (an initiation for an
// unregistered key, truncated messages, a replayed data message from another address) are
// dropped and counted while a and b keep talking; a bad peers file on SIGHUP keeps the list in
// use, a good one that allows c lets c in; the relay exits 0 on SIGTERM. Exit status 0 when
// every step passed.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/crypto/blake2s"
)

var start = time.Now()

func logf(format string, args ...any) {
	log.Printf("[%6.2fs] %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func fail(format string, args ...any) {
	log.Printf("FAIL: "+format, args...)
	if cur != nil {
		if resp, err := http.Get("http://" + cur.metrics + "/metrics"); err == nil {
			io.Copy(os.Stderr, resp.Body)
			resp.Body.Close()
		}
		cur.cmd.Process.Kill()
	}
	os.Exit(1)
}

var cur *relay

const transferBytes = 64 << 20

func main() {
	bin := flag.String("relay", "", "path to hderp-wgrelay")
	shards := flag.Int("shards", 1, "the relay's --shards")
	cookies := flag.Bool("cookies", false,
		"only: a and b meet with the handshake rate at 1/s, through WireGuard's cookie replies")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "usage: wg -relay <hderp-wgrelay>")
		os.Exit(2)
	}
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "wgrelay-test")
	if err != nil {
		fail("%v", err)
	}
	defer os.RemoveAll(dir)

	a, b := newPeer("a", "10.77.0.1"), newPeer("b", "10.77.0.2")
	c, u := newPeer("c", "10.77.0.3"), newPeer("u", "10.77.0.4")
	peersFile := fmt.Sprintf("# test peers\n%s a b\n%s b a\n%s c\n", a.pub.b64(), b.pub.b64(),
		c.pub.b64())
	args := []string{"--shards", fmt.Sprint(*shards)}
	if *cookies {
		args = append(args, "--handshake-rate", "1", "--handshake-burst", "1")
	}
	r, err := startRelay(*bin, dir, peersFile, args...)
	if err != nil {
		fail("start relay: %v", err)
	}
	cur = r
	logf("relay on %s, metrics on %s", r.addr, r.metrics)

	// a knows b, c and u (so the relay, not a, is what keeps c and u out); b knows a.
	a.up(r.addr, []*peer{b}, 1)
	b.up(r.addr, []*peer{a}, 1)
	if !a.ping(b, 60*time.Second) {
		fail("a cannot ping b through the relay")
	}
	if !b.ping(a, 30*time.Second) {
		fail("b cannot ping a through the relay")
	}
	logf("handshake and ping a <-> b: ok (sessions %d)", r.counter("wgrelay_sessions_total"))
	if *cookies {
		// Both peers come up at once from 127.0.0.1: the second initiation is over the rate and
		// gets a cookie reply, which wireguard-go opens with its own code and answers with MAC2.
		sent, proven := r.counter("wgrelay_cookies_sent_total"), r.counter("wgrelay_cookie_proven_total")
		if sent == 0 || proven == 0 {
			fail("cookies sent %d, initiations proven by MAC2 %d: want both > 0", sent, proven)
		}
		logf("cookie replies %d, initiations proven by their MAC2 %d", sent, proven)
		if err := r.stop(); err != nil {
			fail("%v", err)
		}
		fmt.Println("PASS")
		return
	}

	transfer(r, a, b)
	hostile(r, a, b)
	outsiders(r, a, b, c, u)
	reload(r, a, c, peersFile)

	logf("datagrams routed between shards: %d; GSO sends: %d", r.counter("wgrelay_routed_total"),
		r.counter("wgrelay_socket_gso_sends_total"))
	final := r.metricsText()
	if err := r.stop(); err != nil {
		fail("%v", err)
	}
	logf("relay stopped with status 0")
	if os.Getenv("WGTEST_METRICS") != "" {
		os.Stderr.WriteString(final)
	}
	fmt.Println("PASS")
}

// transfer: 64 MiB from a to b over TCP, a SHA-256 of it back from b; a roams at 16 MiB.
func transfer(r *relay, a, b *peer) {
	l := b.listenTCP(9000)
	got := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			fail("accept: %v", err)
		}
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil || n != transferBytes {
			fail("b received %d bytes (%v), want %d", n, err, transferBytes)
		}
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
		c.Close()
	}()
	roamed0 := r.counter("wgrelay_roamed_total")
	conn := a.dialTCP(b, 9000)
	h := sha256.New()
	chunk := make([]byte, 1<<20)
	oldPort := a.port()
	t0 := time.Now()
	for sent := 0; sent < transferBytes; sent += len(chunk) {
		if sent == 16<<20 {
			logf("a moves from UDP port %d to %d mid-transfer", oldPort, a.rebind())
		}
		rand.Read(chunk)
		h.Write(chunk)
		if _, err := conn.Write(chunk); err != nil {
			fail("a write at %d: %v", sent, err)
		}
	}
	conn.(interface{ CloseWrite() error }).CloseWrite()
	var want [32]byte
	copy(want[:], h.Sum(nil))
	sum := <-got
	conn.Close()
	l.Close()
	if sum != want {
		fail("64 MiB transfer: checksum mismatch")
	}
	roamed := r.counter("wgrelay_roamed_total")
	if roamed <= roamed0 {
		fail("a changed its source port but the relay counted no roaming (%d)", roamed)
	}
	logf("64 MiB a -> b in %.1fs, SHA-256 equal, relay roamed %d", time.Since(t0).Seconds(),
		roamed-roamed0)
}

// hostile: datagrams from a socket that is no peer.
func hostile(r *relay, a, b *peer) {
	s, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(r.addr))
	if err != nil {
		fail("%v", err)
	}
	defer s.Close()
	send := func(p []byte) {
		if _, err := s.Write(p); err != nil {
			fail("send: %v", err)
		}
	}
	// An initiation carrying a MAC1 for a key nobody registered.
	_, stranger := newKey()
	init := make([]byte, 148)
	init[0] = 1
	rand.Read(init[4:116])
	putMAC1(init, 116, stranger)
	m0 := r.drop("mac1_unknown")
	send(init)
	r.waitDrop("mac1_unknown", m0+1, "initiation for an unregistered key")

	// Truncated: shorter than a data message's header and tag, an initiation and a response cut
	// short, three bytes.
	last := a.bind.last()
	if len(last) < 48 {
		fail("no data message recorded from a (%d bytes)", len(last))
	}
	bad0 := r.drop("malformed")
	send(last[:31])
	send(init[:100])
	resp := make([]byte, 92)
	resp[0] = 2
	send(resp[:91])
	send([]byte{4, 0, 0})
	r.waitDrop("malformed", bad0+4, "truncated messages")

	// Replayed: a's last data message again from this other address, whole and cut by 5 bytes
	// (a data message's length is free: the relay cannot tell it is cut): neither moves a.
	st0 := r.drop("stale_source")
	send(last)
	send(last[:len(last)-5])
	r.waitDrop("stale_source", st0+2, "replayed data messages from another address")
	if !a.ping(b, 30*time.Second) || !b.ping(a, 30*time.Second) {
		fail("a and b stopped talking after the hostile datagrams")
	}
	logf("hostile datagrams dropped and counted; a <-> b still ping")
}

func putMAC1(msg []byte, off int, pub key) {
	kh := blake2s.Sum256(append([]byte("mac1----"), pub[:]...))
	m, err := blake2s.New128(kh[:])
	if err != nil {
		fail("%v", err)
	}
	m.Write(msg[:off])
	copy(msg[off:], m.Sum(nil))
}

// outsiders: c is registered but not allowed with a; u is not registered. a has both
// configured, so only the relay keeps them out.
func outsiders(r *relay, a, b, c, u *peer) {
	if err := a.dev.IpcSet(fmt.Sprintf("public_key=%s\nallowed_ip=%s/32\npublic_key=%s\nallowed_ip=%s/32\n",
		c.pub.hex(), c.ip, u.pub.hex(), u.ip)); err != nil {
		fail("a: add c and u: %v", err)
	}
	c.up(r.addr, []*peer{a}, 0)
	u.up(r.addr, []*peer{a}, 0)
	p0, m0 := r.drop("pair_refused"), r.drop("response_mac1")
	if c.ping(a, 8*time.Second) {
		fail("c reached a, which does not allow it")
	}
	r.waitDrop("pair_refused", p0+1, "c -> a (registered, not allowed)")
	if u.ping(a, 8*time.Second) {
		fail("u (unregistered) reached a")
	}
	r.waitDrop("response_mac1", m0+1, "u -> a (unregistered)")
	hs := a.handshakes()
	if hs[c.pub.hex()] != 0 || hs[u.pub.hex()] != 0 {
		fail("a completed a handshake with c or u: %v", hs)
	}
	if !a.ping(b, 30*time.Second) {
		fail("a and b stopped talking")
	}
	logf("c (not allowed) and u (unregistered) kept out; a <-> b still ping")
}

// reload: a bad file keeps the list; a good one allowing a <-> c lets c in.
func reload(r *relay, a, c *peer, good string) {
	r.reload(good + "this is not a key\n")
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(r.logs(), "reload refused") {
		if time.Now().After(deadline) {
			fail("no 'reload refused' in the relay's log after a bad peers file")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(r.logs(), "line 5") {
		fail("the refusal does not name the bad line:\n%s", r.logs())
	}
	lines := strings.Split(strings.TrimSpace(good), "\n")
	// a allows b and c; c (no list) allows everyone.
	lines[1] = lines[1] + " c"
	r.reload(strings.Join(lines, "\n") + "\n")
	if !c.ping(a, 60*time.Second) {
		fail("c cannot reach a after the reload allowed it")
	}
	logf("reload: a bad file kept the old list, a good one let c reach a")
	_ = binary.LittleEndian
}
