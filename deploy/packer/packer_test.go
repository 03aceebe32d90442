// Package packer_test parses the image factory's Packer template with
// HashiCorp's HCL parser: it cannot be built here (no cloud), but it must
// be valid HCL with the blocks and variables docs/deploy.md names.
package packer_test

import (
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

func TestTemplateParses(t *testing.T) {
	f, diags := hclparse.NewParser().ParseHCLFile("tidegpu-ollama.pkr.hcl")
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	content, diags := f.Body.Content(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "packer"}, {Type: "variable", LabelNames: []string{"name"}}, {Type: "locals"},
		{Type: "source", LabelNames: []string{"type", "name"}}, {Type: "build"},
	}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	vars, sources := map[string]bool{}, map[string]bool{}
	for _, b := range content.Blocks {
		switch b.Type {
		case "variable":
			vars[b.Labels[0]] = true
		case "source":
			sources[b.Labels[0]+"."+b.Labels[1]] = true
		}
	}
	for _, v := range []string{"region", "model", "tidegpu_binary", "instance_type"} {
		if !vars[v] {
			t.Errorf("no variable %q", v)
		}
	}
	if !sources["amazon-ebs.ollama"] {
		t.Errorf("no amazon-ebs source: %v", sources)
	}
}
