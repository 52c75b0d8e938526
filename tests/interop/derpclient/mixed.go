package main

import (
	"fmt"

	"tailscale.com/derp"
)

// mixedChecks: url and url2 are two nodes of one region meshed with each other (hderp-server
// and derper): clients on either reach clients on the other, and hear when they leave.
func mixedChecks() []check {
	return []check{
		{"mixed-packets-both-ways", checkMixedPackets},
		{"mixed-peergone-both-ways", checkMixedGone},
	}
}

// crossPair: A on url, B on url2, each having reached the other once (pairOn: the mesh links
// tell each node about the other's clients a moment after they log in).
func (e *env) crossPair() (*peer, *peer, error) {
	return e.pairOn("A@"+e.url, e.url, "B@"+e.url2, e.url2)
}

func checkMixedPackets(e *env) error {
	a, b, err := e.crossPair()
	if err != nil {
		return err
	}
	defer closeAll(a, b)
	if err := transfer(a, b, 2000); err != nil {
		return fmt.Errorf("%s -> %s: %w", a.name, b.name, err)
	}
	if err := transfer(b, a, 2000); err != nil {
		return fmt.Errorf("%s -> %s: %w", b.name, a.name, err)
	}
	return nil
}

// One that left the other node: PeerGone "disconnected" from this one, both ways.
func checkMixedGone(e *env) error {
	for _, swap := range []bool{false, true} {
		a, b, err := e.crossPair()
		if err != nil {
			return err
		}
		if swap {
			a, b = b, a
		}
		b.close()
		_, err = a.expect("PeerGone("+b.name+")", peerGone(b.pub(), derp.PeerGoneReasonDisconnected))
		a.close()
		if err != nil {
			return err
		}
	}
	return nil
}
