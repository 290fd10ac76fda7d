// Command coredns is CoreDNS with only the plugins a test cluster's DNS needs: the
// kubernetes plugin answers for Services and pods, and nothing is forwarded, so no query
// ever leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
	"github.com/coredns/coredns/coremain"
)

// The plugins' order in a query's chain: CoreDNS's own plugin.cfg order, cut to these.
var directives = []string{"ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes"}

func main() {
	dnsserver.Directives = directives
	coremain.Run()
}
