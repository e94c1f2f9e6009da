// Command sbom writes an SPDX 2.3 JSON software bill of materials for Go
// binaries, from the module information the Go toolchain records in each
// (the same as `go version -m`): the main module, every module linked in
// with its version and go.sum hash, and the Go toolchain. It reads only
// the binaries; nothing is fetched.
//
//	go run ./release/sbom -name berth-v0.1.0 -created 2026-12-07T00:00:00Z BINARY... > sbom.spdx.json
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type pkg struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	Version          string        `json:"versionInfo,omitempty"`
	Download         string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	Copyright        string        `json:"copyrightText"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

type document struct {
	SPDXVersion  string `json:"spdxVersion"`
	DataLicense  string `json:"dataLicense"`
	SPDXID       string `json:"SPDXID"`
	Name         string `json:"name"`
	Namespace    string `json:"documentNamespace"`
	CreationInfo struct {
		Created  string   `json:"created"`
		Creators []string `json:"creators"`
	} `json:"creationInfo"`
	Describes     []string       `json:"documentDescribes"`
	Packages      []pkg          `json:"packages"`
	Relationships []relationship `json:"relationships"`
}

// spdxID makes an SPDX identifier from s: letters, digits, '.' and '-'.
func spdxID(kind, s string) string {
	var b strings.Builder
	b.WriteString("SPDXRef-" + kind + "-")
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func main() {
	name := flag.String("name", "berth", "document name")
	created := flag.String("created", "", "creation time, RFC 3339 (default: now; a release passes its commit's time, for a reproducible file)")
	namespace := flag.String("namespace", "https://berth.dev/spdx/", "document namespace prefix; the name is appended")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "sbom: name the binaries to describe: sbom [-name N] [-created T] BINARY...")
		os.Exit(2)
	}
	when := time.Now().UTC()
	if *created != "" {
		t, err := time.Parse(time.RFC3339, *created)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sbom: -created %q: %v; use RFC 3339, e.g. 2026-12-07T18:00:00Z\n", *created, err)
			os.Exit(2)
		}
		when = t.UTC()
	}
	var doc document
	doc.SPDXVersion, doc.DataLicense, doc.SPDXID, doc.Name = "SPDX-2.3", "CC0-1.0", "SPDXRef-DOCUMENT", *name
	doc.Namespace = *namespace + *name
	doc.CreationInfo.Created = when.Format(time.RFC3339)
	doc.CreationInfo.Creators = []string{"Tool: berth release/sbom"}

	mods := map[string]pkg{} // SPDXID → module, shared by the binaries
	for _, bin := range flag.Args() {
		data, err := os.ReadFile(bin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
			os.Exit(1)
		}
		bi, err := buildinfo.ReadFile(bin)
		if err != nil {
			fmt.Fprintf(os.Stderr, "sbom: read the Go build information of %s: %v; is it a Go binary?\n", bin, err)
			os.Exit(1)
		}
		sum := sha256.Sum256(data)
		var settings []string
		for _, s := range bi.Settings {
			settings = append(settings, s.Key+"="+s.Value)
		}
		fileID := spdxID("File", filepath.Base(bin))
		doc.Describes = append(doc.Describes, fileID)
		doc.Packages = append(doc.Packages, pkg{
			Name: filepath.Base(bin), SPDXID: fileID, Version: bi.Main.Version,
			Download: "NOASSERTION", Checksums: []checksum{{"SHA256", hex.EncodeToString(sum[:])}},
			LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", Copyright: "NOASSERTION",
			Comment: fmt.Sprintf("main package %s of module %s, built with %s; %s", bi.Path, bi.Main.Path, bi.GoVersion, strings.Join(settings, " ")),
		})
		goID := spdxID("Go", bi.GoVersion)
		mods[goID] = pkg{Name: "go", SPDXID: goID, Version: strings.TrimPrefix(bi.GoVersion, "go"),
			Download: "https://go.dev/dl/", LicenseConcluded: "BSD-3-Clause", LicenseDeclared: "BSD-3-Clause", Copyright: "NOASSERTION",
			ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + strings.TrimPrefix(bi.GoVersion, "go")}}}
		doc.Relationships = append(doc.Relationships, relationship{fileID, "DEPENDS_ON", goID})
		for _, d := range bi.Deps {
			m := d
			if d.Replace != nil {
				m = d.Replace
			}
			id := spdxID("Module", m.Path+"@"+m.Version)
			mods[id] = pkg{Name: m.Path, SPDXID: id, Version: m.Version,
				Download:         "https://proxy.golang.org/" + strings.ToLower(m.Path) + "/@v/" + m.Version + ".zip",
				LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", Copyright: "NOASSERTION",
				Comment:      "go.sum " + m.Sum, // h1: is not an SPDX checksum algorithm
				ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + m.Path + "@" + m.Version}}}
			doc.Relationships = append(doc.Relationships, relationship{fileID, "DEPENDS_ON", id})
		}
	}
	ids := make([]string, 0, len(mods))
	for id := range mods {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		doc.Packages = append(doc.Packages, mods[id])
	}
	for _, id := range doc.Describes {
		doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", id})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}
