package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Marshal renders c as YAML with fields in declaration order, the form that
// `nodegc config defaults` prints and Decode reads back.
func Marshal(c *NodeGCConfiguration) ([]byte, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding configuration: %w", err)
	}
	// JSON is YAML: parsing it as YAML keeps the field order, which a
	// round trip through a map would lose.
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("encoding configuration: %w", err)
	}
	blockStyle(&root)
	apiVersionFirst(&root)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("encoding configuration: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encoding configuration: %w", err)
	}
	return buf.Bytes(), nil
}

// blockStyle drops the flow style the JSON input gave every node, so the
// encoder picks plain block YAML and quotes only where needed.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// apiVersionFirst moves apiVersion before kind, as Kubernetes manifests are
// written (the embedded TypeMeta declares kind first).
func apiVersionFirst(doc *yaml.Node) {
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return
	}
	m := doc.Content[0]
	if len(m.Content) >= 4 && m.Content[0].Value == "kind" && m.Content[2].Value == "apiVersion" {
		m.Content[0], m.Content[1], m.Content[2], m.Content[3] = m.Content[2], m.Content[3], m.Content[0], m.Content[1]
	}
}

// Digest is the first 16 hex digits of the SHA-256 of c as Marshal renders
// it: the same for two configurations that set the same values, however
// their files are written (order, comments, defaults left out or given).
// The agent exports it as nodegc_config_info{sha256}.
func Digest(c *NodeGCConfiguration) (string, error) {
	data, err := Marshal(c)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:16], nil
}
