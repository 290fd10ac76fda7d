// Command pause holds a pod's namespaces, as the Kubernetes pause container does: it waits
// for SIGINT or SIGTERM and exits 0. Built static, it is the whole of the local pause image,
// so the test node never pulls one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
