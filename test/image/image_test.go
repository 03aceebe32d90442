// Package image tests `make image`: the OCI image layout it writes (format:
// https://github.com/opencontainers/image-spec/blob/main/image-layout.md,
// manifest.md and config.md) runs the stripped static binary as a non-root
// user. The layout is read with the standard library only, as the spec
// describes it, not with the library that wrote it.
package image

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/tidegpu/tidegpu/test/testbin"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	MediaType string       `json:"mediaType"`
	Config    descriptor   `json:"config"`
	Layers    []descriptor `json:"layers"`
}

type config struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Env        []string `json:"Env"`
	} `json:"config"`
}

// blob reads a blob of the layout by its digest, checking its size.
func blob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	algo, hex, ok := strings.Cut(d.Digest, ":")
	if !ok || algo != "sha256" {
		t.Fatalf("digest %q: want sha256:...", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", algo, hex))
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s: %d bytes, the descriptor says %d", d.Digest, len(b), d.Size)
	}
	return b
}

func TestMakeImageWritesANonRootOCILayout(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the image")
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "image")
	cmd := exec.Command("make", "-C", testbin.RepoRoot(), "image", "BIN="+filepath.Join(tmp, "bin"), "IMAGE_DIR="+out, "IMAGE_TAG=tidegpu:test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image: %v\n%s", err, b)
	}

	layoutFile, err := os.ReadFile(filepath.Join(out, "oci-layout"))
	if err != nil || !strings.Contains(string(layoutFile), `"imageLayoutVersion"`) {
		t.Fatalf("oci-layout: %v %s", err, layoutFile)
	}
	var idx index
	b, err := os.ReadFile(filepath.Join(out, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &idx); err != nil || idx.SchemaVersion != 2 || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, b)
	}
	if got := idx.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != "tidegpu:test" {
		t.Errorf("ref name %q, want tidegpu:test", got)
	}
	var m manifest
	if err := json.Unmarshal(blob(t, out, idx.Manifests[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m.MediaType != "application/vnd.oci.image.manifest.v1+json" || m.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("media types %q / %q: want OCI's", m.MediaType, m.Config.MediaType)
	}
	var c config
	if err := json.Unmarshal(blob(t, out, m.Config), &c); err != nil {
		t.Fatal(err)
	}
	if c.Config.User != "65532:65532" {
		t.Errorf("config User %q, want 65532:65532 (non-root)", c.Config.User)
	}
	if c.OS != "linux" || c.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", c.OS, c.Architecture, runtime.GOARCH)
	}
	if len(c.Config.Entrypoint) != 1 {
		t.Fatalf("entrypoint %v: want the binary alone", c.Config.Entrypoint)
	}

	// Unpack the layers: the entrypoint, /etc/passwd's user 65532.
	files := map[string][]byte{}
	rootfs := filepath.Join(tmp, "rootfs")
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("layer media type %q", l.MediaType)
		}
		f, err := os.Open(filepath.Join(out, "blobs", "sha256", strings.TrimPrefix(l.Digest, "sha256:")))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(rootfs, filepath.FromSlash(h.Name))
			if !strings.HasPrefix(dst, rootfs+string(filepath.Separator)) {
				t.Fatalf("layer entry %q leaves the root", h.Name)
			}
			if h.Typeflag == tar.TypeDir {
				if err := os.MkdirAll(dst, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dst, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
					t.Fatal(err)
				}
				_ = os.Lchown(dst, h.Uid, h.Gid) // only root can; the chroot run below needs root anyway
			}
			if h.Typeflag == tar.TypeReg {
				body, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				files["/"+strings.TrimPrefix(h.Name, "/")] = body
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, body, os.FileMode(h.Mode&0o777)); err != nil {
					t.Fatal(err)
				}
				if h.Uid == 0 && strings.HasPrefix(h.Name, "home/") {
					t.Errorf("%s owned by root", h.Name)
				}
			}
		}
		f.Close()
	}
	if !strings.Contains(string(files["/etc/passwd"]), "nonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no user 65532:\n%s", files["/etc/passwd"])
	}
	entry := c.Config.Entrypoint[0]
	bin, ok := files[entry]
	if !ok {
		t.Fatalf("the entrypoint %s is not in the layers", entry)
	}
	exe := filepath.Join(tmp, "extracted-tidegpu")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	if ef.Section(".symtab") != nil || ef.Section(".debug_info") != nil {
		t.Errorf("the binary is not stripped (a .symtab or .debug_info section)")
	}
	if _, err := ef.DynamicSymbols(); err == nil {
		t.Errorf("the binary is dynamically linked: want static (CGO_ENABLED=0)")
	}
	ef.Close()
	if runtime.GOOS == "linux" {
		v, err := exec.Command(exe, "--version").CombinedOutput()
		if err != nil || !strings.Contains(string(v), "tidegpu") {
			t.Fatalf("the image's binary does not run: %v\n%s", err, v)
		}
		t.Logf("image %s runs: %s", idx.Manifests[0].Digest, strings.TrimSpace(string(v)))
	}
	t.Logf("binary %d bytes, layer %d bytes compressed", len(bin), m.Layers[0].Size)

	// Run the entrypoint inside the image's own file system as the config's
	// user, as a container runtime would (chroot needs root).
	if os.Geteuid() != 0 {
		t.Log("not root: the run inside the image's root file system as 65532 is skipped")
		return
	}
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		t.Fatalf("chroot (coreutils) not found: %v", err)
	}
	run := exec.Command(chroot, "--userspec="+c.Config.User, rootfs, entry, "--version")
	run.Env = c.Config.Env
	v, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(v), "tidegpu") {
		t.Fatalf("the entrypoint does not run in the image's root as %s: %v\n%s", c.Config.User, err, v)
	}
}

// modeBits maps a tar header's setuid, setgid and sticky bits to Go's.
func modeBits(mode int64) os.FileMode {
	var m os.FileMode
	if mode&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}
