package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"go4.org/mem"
	"tailscale.com/derp"
	"tailscale.com/derp/derpconst"
	"tailscale.com/derp/derphttp"
	"tailscale.com/types/key"
)

// metaCert: the server key and protocol version from the chain's meta certificate, as
// derphttp's parseMetaCert reads them (zero when there is none).
func metaCert(cs *tls.ConnectionState) (key.NodePublic, int) {
	for _, c := range cs.PeerCertificates {
		if hex, ok := strings.CutPrefix(c.Subject.CommonName,
			derpconst.MetaCertCommonNamePrefix); ok {
			if pub, err := key.ParseNodePublicUntyped(mem.S(hex)); err == nil &&
				c.SerialNumber.BitLen() <= 8 {
				return pub, int(c.SerialNumber.Int64())
			}
		}
	}
	return key.NodePublic{}, 0
}

// The ClientInfo fields derp.Client of v1.102.5 sends (every option set).
var clientInfoFields = []string{"AppName", "CanAckPings", "IsProber", "meshKey", "version"}

// A client with every ClientInfo option (mesh key, CanAckPings, IsProber, AppName) logs in,
// is shown to watchers as mesh peer and prober, and relays; then the same ClientInfo with
// fields no version sends yet (a newer client's) is accepted the same way.
func checkClientInfo(e *env) error {
	a, err := e.dial("A", e.url, nil)
	if err != nil {
		return err
	}
	defer a.close()
	full, err := e.dial("F", e.url, func(c *derphttp.Client) {
		c.MeshKey, c.IsProber, c.AppName = e.meshKey, true, "hderp-interop"
		c.SetCanAckPings(true)
	})
	if err != nil {
		return err
	}
	defer full.close()
	if err := reachBoth(a, full); err != nil {
		return err
	}
	if e.ws {
		return nil // no WatchConns over WebSocket; the raw login below speaks HTTP or TLS
	}
	w, err := e.watcher(e.url)
	if err != nil {
		return err
	}
	defer w.close()
	want := derp.PeerPresentFlags(derp.PeerPresentIsMeshPeer | derp.PeerPresentIsProber)
	if err := presentAs(w, "every field", full.pub(), want, nil); err != nil {
		return err
	}
	return e.checkUnknownFields(a, w)
}

func (e *env) checkUnknownFields(a, w *peer) error {
	priv := key.NewNode()
	nc, brw, server, err := e.rawUpgrade()
	if err != nil {
		return err
	}
	defer nc.Close()
	rw := &infoRewriter{w: nc, priv: priv, server: server}
	brw.Writer = bufio.NewWriter(rw)
	c, err := derp.NewClient(priv, nc, brw, e.logf, derp.ServerPublicKey(server),
		derp.MeshKey(e.meshKey), derp.IsProber(true), derp.CanAckPings(true),
		derp.AppName("hderp-interop"))
	if err != nil {
		return err
	}
	if rw.err != nil {
		return rw.err
	}
	var got []string
	for k := range rw.sent {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, clientInfoFields) {
		return fmt.Errorf("derp.Client sent ClientInfo fields %v, the check expects %v", got,
			clientInfoFields)
	}
	want := derp.PeerPresentFlags(derp.PeerPresentIsMeshPeer | derp.PeerPresentIsProber)
	if err := presentAs(w, "with unknown fields", priv.Public(), want, nil); err != nil {
		return err
	}
	if err := a.c.Send(priv.Public(), []byte("to U")); err != nil {
		return err
	}
	nc.SetReadDeadline(time.Now().Add(waitS))
	for {
		m, err := c.Recv()
		if err != nil {
			return fmt.Errorf("client with unknown ClientInfo fields: %w", err)
		}
		if rp, ok := m.(derp.ReceivedPacket); ok && rp.Source == a.pub() {
			break
		}
	}
	if err := c.Send(a.pub(), []byte("from U")); err != nil {
		return err
	}
	_, err = a.expect("packet from U", packetFrom(priv.Public(), []byte("from U")))
	return err
}

// rawUpgrade: the HTTP upgrade to DERP by hand (plain or TLS verified against the test CA),
// then the server's key frame; returns the connection and its reader/writer.
func (e *env) rawUpgrade() (net.Conn, *bufio.ReadWriter, key.NodePublic, error) {
	var nc net.Conn
	var err error
	addr := net.JoinHostPort(e.host, e.port)
	d := &net.Dialer{Timeout: waitS}
	if e.tls {
		nc, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: e.roots,
			ServerName: e.host})
	} else {
		nc, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, nil, key.NodePublic{}, err
	}
	nc.SetDeadline(time.Now().Add(waitS))
	brw := bufio.NewReadWriter(bufio.NewReader(nc), bufio.NewWriter(nc))
	fmt.Fprintf(brw, "GET /derp HTTP/1.1\r\nHost: %s\r\nUpgrade: DERP\r\nConnection: Upgrade\r\n\r\n",
		addr)
	if err := brw.Flush(); err != nil {
		nc.Close()
		return nil, nil, key.NodePublic{}, err
	}
	fail := func(err error) (net.Conn, *bufio.ReadWriter, key.NodePublic, error) {
		nc.Close()
		return nil, nil, key.NodePublic{}, err
	}
	resp, err := http.ReadResponse(brw.Reader, nil)
	if err != nil {
		return fail(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fail(fmt.Errorf("upgrade: %s", resp.Status))
	}
	var hdr [5]byte
	if _, err := io.ReadFull(brw, hdr[:]); err != nil {
		return fail(err)
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if derp.FrameType(hdr[0]) != derp.FrameServerKey || n < uint32(len(derp.Magic))+32 || n > 1024 {
		return fail(fmt.Errorf("server greeting: frame %#x, %d bytes", hdr[0], n))
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(brw, body); err != nil {
		return fail(err)
	}
	if string(body[:len(derp.Magic)]) != derp.Magic {
		return fail(fmt.Errorf("server greeting: bad magic"))
	}
	nc.SetDeadline(time.Time{})
	return nc, brw, key.NodePublicFromRaw32(mem.B(body[len(derp.Magic) : len(derp.Magic)+32])), nil
}

// infoRewriter passes the client's bytes through, except its first frame (ClientInfo): it
// opens the sealed JSON, keeps what the client sent (sent), adds fields no client sends
// today and seals it again.
type infoRewriter struct {
	w      io.Writer
	priv   key.NodePrivate
	server key.NodePublic
	buf    []byte
	done   bool
	sent   map[string]json.RawMessage
	err    error
}

func (r *infoRewriter) Write(p []byte) (int, error) {
	if r.done {
		return r.w.Write(p)
	}
	r.buf = append(r.buf, p...)
	if len(r.buf) < 5 || uint32(len(r.buf)-5) < binary.BigEndian.Uint32(r.buf[1:5]) {
		return len(p), nil
	}
	n := 5 + binary.BigEndian.Uint32(r.buf[1:5])
	frame, rest := r.buf[:n], r.buf[n:]
	r.done = true
	out, err := r.rewrite(frame)
	if err != nil {
		r.err = err
		return 0, err
	}
	if _, err := r.w.Write(append(out, rest...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (r *infoRewriter) rewrite(frame []byte) ([]byte, error) {
	if derp.FrameType(frame[0]) != derp.FrameClientInfo || len(frame) < 5+32 {
		return nil, fmt.Errorf("first client frame %#x, want ClientInfo", frame[0])
	}
	msg, ok := r.priv.OpenFrom(r.server, frame[5+32:])
	if !ok {
		return nil, fmt.Errorf("cannot open the client's ClientInfo box")
	}
	if err := json.Unmarshal(msg, &r.sent); err != nil {
		return nil, err
	}
	grown := map[string]any{}
	for k, v := range r.sent {
		grown[k] = v
	}
	grown["FutureString"] = "a field a newer client sends"
	grown["FutureObject"] = map[string]any{"list": []int{1, 2, 3},
		"nested": map[string]bool{"x": true}}
	grown["futureNumber"] = 12345678901
	js, err := json.Marshal(grown)
	if err != nil {
		return nil, err
	}
	box := r.priv.SealTo(r.server, js)
	out := make([]byte, 5, 5+32+len(box))
	out[0] = byte(derp.FrameClientInfo)
	binary.BigEndian.PutUint32(out[1:], uint32(32+len(box)))
	out = append(out, frame[5:5+32]...)
	return append(out, box...), nil
}
