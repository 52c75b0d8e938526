package main

import (
	"fmt"
	"net/http"
	"strings"

	"tailscale.com/derp"
	"tailscale.com/envknob"
)

// The plain HTTP endpoints Tailscale's clients use beside /derp: /generate_204 with the
// X-Tailscale-Challenge of captive-portal detection (net/captivedetection sends "ts_" and the
// node's address; derpserver.ServeNoContent answers "response <challenge>" for at most 64
// characters of [a-zA-Z0-9._:-], nothing otherwise), and /derp/probe and /derp/latency-check
// (netcheck, derpprobe): GET and HEAD answered with a CORS header, other methods 405.
func checkHTTPEndpoints(e *env) error {
	base := strings.TrimSuffix(e.url, "/derp")
	hc := e.httpClient()
	for _, c := range []struct{ chal, resp string }{
		{"ts_127.0.0.1", "response ts_127.0.0.1"},
		{"ts_[::1]:80", ""}, // '[' is not a challenge character
		{strings.Repeat("a", 64), "response " + strings.Repeat("a", 64)},
		{strings.Repeat("b", 65), ""},
	} {
		req, _ := http.NewRequest("GET", base+"/generate_204?t=1765000000", nil)
		req.Header.Set("Cache-Control", "no-cache, no-store, must-revalidate, no-transform, max-age=0")
		req.Header.Set("X-Tailscale-Challenge", c.chal)
		r, err := hc.Do(req)
		if err != nil {
			return err
		}
		r.Body.Close()
		if r.StatusCode != http.StatusNoContent {
			return fmt.Errorf("/generate_204: %s, want 204", r.Status)
		}
		if got := r.Header.Get("X-Tailscale-Response"); got != c.resp {
			return fmt.Errorf("/generate_204 challenge %q: X-Tailscale-Response %q, want %q",
				c.chal, got, c.resp)
		}
	}
	for _, path := range []string{"/derp/probe", "/derp/latency-check"} {
		for _, m := range []string{"GET", "HEAD", "POST"} {
			req, _ := http.NewRequest(m, base+path, nil)
			r, err := hc.Do(req)
			if err != nil {
				return err
			}
			r.Body.Close()
			want, cors := http.StatusOK, "*"
			if m == "POST" {
				want, cors = http.StatusMethodNotAllowed, ""
			}
			if r.StatusCode != want || r.Header.Get("Access-Control-Allow-Origin") != cors {
				return fmt.Errorf("%s %s: %s, CORS %q; want %d, %q", m, path, r.Status,
					r.Header.Get("Access-Control-Allow-Origin"), want, cors)
			}
		}
	}
	return nil
}

// Packets of the edge sizes: empty, one byte, and derp.MaxPacketSize (64 KiB) and just under,
// each arriving whole. With -ws the sender connects over TCP, the receiver over WebSocket:
// Tailscale's WebSocket client (coder/websocket) reads messages of at most 32 KiB, so a server
// must split a big packet's frame into several messages. (A WebSocket sender's 64 KiB message
// is derper's to refuse, which it does: its reads take 32 KiB a message too.)
func checkPacketSizes(e *env) error {
	a, err := e.dialTCP("A")
	if err != nil {
		return err
	}
	defer a.close()
	b, err := e.dial("B", e.url, nil)
	if err != nil {
		return err
	}
	defer b.close()
	if err := reachBoth(a, b); err != nil {
		return err
	}
	for _, n := range []int{0, 1, derp.MaxPacketSize - 1, derp.MaxPacketSize, 1400} {
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(i*13 + n)
		}
		if err := a.c.Send(b.pub(), body); err != nil {
			return fmt.Errorf("send %d bytes: %w", n, err)
		}
		what := fmt.Sprintf("the %d-byte packet", n)
		if _, err := b.expect(what, packetFrom(a.pub(), body)); err != nil {
			return err
		}
	}
	return nil
}

// dialTCP: a client on url over plain TCP or TLS even with -ws (the knob is read at connect).
func (e *env) dialTCP(name string) (*peer, error) {
	if e.ws {
		envknob.Setenv("TS_DEBUG_DERP_WS_CLIENT", "")
		defer envknob.Setenv("TS_DEBUG_DERP_WS_CLIENT", "1")
	}
	return e.dial(name, e.url, nil)
}
