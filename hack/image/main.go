// Command image writes the tidegpu container image as an OCI image layout
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// without a Docker daemon: one layer on an empty base holding the static
// binary, an /etc/passwd and /etc/group entry for the non-root user 65532
// ("nonroot", as distroless's), its home, a /tmp, and the build host's CA
// bundle; the config runs the binary as 65532:65532. Every file has a fixed
// time and owner, so the same binary gives the same image digest.
//
//	go -C hack/image run . -binary bin/linux-amd64/tidegpu -arch amd64 -out bin/image -tag tidegpu:dev
//
// Push it with any OCI tool (crane, skopeo, oras): `crane push bin/image REF`
// or `skopeo copy oci:bin/image docker://REF`.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The non-root user and group of the image (distroless's "nonroot").
const (
	uid  = 65532
	user = "65532:65532"
)

// epoch is every file's and the image's time: reproducible digests.
var epoch = time.Unix(0, 0).UTC()

func main() {
	var (
		binary  = flag.String("binary", "", "the static linux tidegpu binary (required)")
		arch    = flag.String("arch", "amd64", "its GOARCH: amd64 or arm64")
		out     = flag.String("out", "bin/image", "the OCI layout directory to write (replaced)")
		tag     = flag.String("tag", "tidegpu:dev", "the image's name in the layout (org.opencontainers.image.ref.name)")
		caFile  = flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle for the clouds' HTTPS APIs; empty for none")
		version = flag.String("version", "dev", "org.opencontainers.image.version")
	)
	flag.Parse()
	if err := run(*binary, *arch, *out, *tag, *caFile, *version); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, arch, out, tag, caFile, version string) error {
	if binary == "" {
		return errors.New("-binary is required: the static linux binary to put in the image")
	}
	if arch != "amd64" && arch != "arm64" {
		return fmt.Errorf("-arch %q: want amd64 or arm64", arch)
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("-binary: %w", err)
	}
	var ca []byte
	if caFile != "" {
		if ca, err = os.ReadFile(caFile); err != nil {
			return fmt.Errorf("-ca-certs: %w (pass -ca-certs= for an image without a CA bundle)", err)
		}
	}
	layerTar, err := rootfs(bin, ca)
	if err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "hack/image: tidegpu, passwd, CA bundle", Comment: "tidegpu " + version,
	}})
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{"/tidegpu"},
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/",
			"HOME=/home/nonroot",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "tidegpu",
			"org.opencontainers.image.version": version,
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := os.RemoveAll(out); err != nil {
		return err
	}
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}),
		layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return err
	}
	d, _ := img.Digest()
	size, _ := layer.Size()
	fmt.Printf("image: %s (linux/%s) %s, layer %d bytes compressed, in %s\n", tag, arch, d, size, filepath.Clean(out))
	return nil
}

// rootfs is the image's one layer: the binary at /tidegpu, the user 65532,
// its home, /tmp and the CA bundle, each with a fixed time and owner.
func rootfs(bin, ca []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, owner int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: owner, Gid: owner, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	passwd := strings.Join([]string{
		"root:x:0:0:root:/root:/sbin/nologin",
		fmt.Sprintf("nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin", uid, uid),
		"",
	}, "\n")
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, uid) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return file("tidegpu", 0o755, bin) },
	}
	if len(ca) > 0 {
		steps = append(steps,
			func() error { return dir("etc/ssl", 0o755, 0) },
			func() error { return dir("etc/ssl/certs", 0o755, 0) },
			func() error { return file("etc/ssl/certs/ca-certificates.crt", 0o644, ca) })
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
