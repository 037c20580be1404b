// Command image writes the chart's container image as an OCI image
// layout in a tar archive (what `make image` runs): the static rampart
// binary, CA certificates, and a non-root user 65532 — no Docker engine,
// only go-containerregistry (the library ko and crane are made of).
//
//	go run . -binary ../../bin/image/rampart -out ../../bin/rampart-image.tar -tag rampart:dev
//
// The archive loads with `ctr images import`, `podman load` or `skopeo
// copy oci-archive:…`. Timestamps are fixed (SOURCE_DATE_EPOCH, else the
// Unix epoch), so the same binary gives the same digest.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o Options
	flag.StringVar(&o.Binary, "binary", "", "the static rampart binary (CGO_ENABLED=0)")
	flag.StringVar(&o.Out, "out", "rampart-image.tar", "the OCI archive to write")
	flag.StringVar(&o.Tag, "tag", "rampart:dev", "the image's name in the archive (org.opencontainers.image.ref.name)")
	flag.StringVar(&o.CACerts, "ca-certificates", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to ship")
	flag.Parse()
	digest, err := Write(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Printf("image: wrote %s (%s, manifest %s)\n", o.Out, o.Tag, digest)
}
