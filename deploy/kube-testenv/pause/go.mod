// The pause binary of the test node's local pause image.
module github.com/appliance/kube-testenv/pause

go 1.24.0
