// Command setecserver is a setec secrets server (github.com/tailscale/setec's own server and
// database, at the version tailscale.com v1.102.5 requires, with setectest's all-access
// identity instead of a tailnet's) on 127.0.0.1, for the interop suite's -secrets-url tests.
// It listens on a port the kernel picks and writes "127.0.0.1:PORT" to -addr-file once it
// serves; -put NAME=VALUE (repeatable) stores secrets first; others can be stored while it runs
// through setec's own API (POST /api/put, as `setec put` does). Its database lives in -dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/tailscale/setec/acl"
	"github.com/tailscale/setec/audit"
	"github.com/tailscale/setec/db"
	"github.com/tailscale/setec/server"
	"github.com/tailscale/setec/setectest"
	"github.com/tink-crypto/tink-go/v2/testutil"
)

type puts []string

func (p *puts) String() string     { return strings.Join(*p, ",") }
func (p *puts) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var (
		dir, addrFile string
		put           puts
	)
	flag.StringVar(&dir, "dir", "", "directory for the database (required)")
	flag.StringVar(&addrFile, "addr-file", "", "write the listening address here (required)")
	flag.Var(&put, "put", "NAME=VALUE: a secret stored at start (repeatable)")
	flag.Parse()
	if dir == "" || addrFile == "" {
		log.Fatal("setecserver: -dir and -addr-file are required")
	}
	audits := audit.New(io.Discard)
	d, err := db.Open(filepath.Join(dir, "setec.db"), &testutil.DummyAEAD{Name: "hderp-interop"},
		audits)
	if err != nil {
		log.Fatalf("setecserver: opening the database: %v", err)
	}
	caller := db.Caller{ // setectest's superuser: every action on every secret
		Principal: audit.Principal{User: "interop", IP: netip.MustParseAddr("127.0.0.1"),
			Hostname: "interop"},
		Permissions: acl.Rules{acl.Rule{
			Action: []acl.Action{acl.ActionGet, acl.ActionInfo, acl.ActionPut,
				acl.ActionActivate, acl.ActionDelete},
			Secret: []acl.Secret{"*"},
		}},
	}
	for _, p := range put {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			log.Fatalf("setecserver: -put %q: expected NAME=VALUE", p)
		}
		if _, err := d.Put(caller, name, []byte(value)); err != nil {
			log.Fatalf("setecserver: put %q: %v", name, err)
		}
	}
	mux := http.NewServeMux()
	if _, err := server.New(context.Background(), server.Config{
		DB: d, AuditLog: audits, WhoIs: setectest.AllAccess, Mux: mux,
	}); err != nil {
		log.Fatalf("setecserver: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatalf("setecserver: %v", err)
	}
	tmp := addrFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(ln.Addr().String()+"\n"), 0o644); err != nil {
		log.Fatalf("setecserver: %v", err)
	}
	if err := os.Rename(tmp, addrFile); err != nil {
		log.Fatalf("setecserver: %v", err)
	}
	fmt.Printf("setecserver: serving on %s\n", ln.Addr())
	log.Fatal(http.Serve(ln, mux))
}
