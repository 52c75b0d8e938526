// Command derpclient drives a running hderp-server with Tailscale's own DERP client
// (tailscale.com/derp/derphttp). Placeholder: the checks follow.
package main

import (
	"fmt"
	"os"

	"tailscale.com/derp/derphttp"
	"tailscale.com/types/key"
)

func main() {
	c, err := derphttp.NewClient(key.NewNode(), "http://127.0.0.1:1/derp", func(string, ...any) {}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c.Close()
}
