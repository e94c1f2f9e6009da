// Command mkimage packs one static program into a single-layer image in the
// docker-archive format (what `docker save` writes and `ctr images import` reads):
//
//	mkimage -name berth.local/pause:1 -o pause.tar /path/to/pause
//
// The program lands at /<basename> and is the image's entrypoint. The archive is
// byte-for-byte reproducible (fixed times and owners). tests/kube/up uses it for the
// pod sandbox image, so the test cluster needs no registry.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

func main() {
	name := flag.String("name", "", "image reference to tag the image with, e.g. berth.local/pause:1")
	out := flag.String("o", "", "output tarball")
	flag.Parse()
	if *name == "" || *out == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: mkimage -name REF -o OUT.tar PROGRAM")
		os.Exit(2)
	}
	if err := run(*name, *out, flag.Arg(0)); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

var epoch = time.Unix(0, 0).UTC()

func run(name, out, program string) error {
	bin, err := os.ReadFile(program)
	if err != nil {
		return fmt.Errorf("read the program to pack: %w", err)
	}
	base := filepath.Base(program)

	// The layer: the program alone, owned by root, executable.
	var layer bytes.Buffer
	if err := writeTar(&layer, []entry{{name: base, mode: 0o755, data: bin}}); err != nil {
		return fmt.Errorf("write the layer: %w", err)
	}
	layerSum := sha256.Sum256(layer.Bytes())
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])

	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       map[string]any{"Entrypoint": []string{"/" + base}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{diffID}},
	})
	if err != nil {
		return err
	}
	configSum := sha256.Sum256(config)
	configName := hex.EncodeToString(configSum[:]) + ".json"
	layerName := hex.EncodeToString(layerSum[:]) + "/layer.tar"

	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{name},
		"Layers":   []string{layerName},
	}})
	if err != nil {
		return err
	}

	var archive bytes.Buffer
	if err := writeTar(&archive, []entry{
		{name: configName, mode: 0o644, data: config},
		{name: filepath.Dir(layerName) + "/", mode: 0o755, dir: true},
		{name: layerName, mode: 0o644, data: layer.Bytes()},
		{name: "manifest.json", mode: 0o644, data: manifest},
	}); err != nil {
		return fmt.Errorf("write the archive: %w", err)
	}
	if err := os.WriteFile(out, archive.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}

type entry struct {
	name string
	mode int64
	data []byte
	dir  bool
}

func writeTar(w *bytes.Buffer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
