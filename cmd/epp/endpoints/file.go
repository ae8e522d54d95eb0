// Package endpoints is the EPP's standalone endpoint source: a YAML file listing model-server
// endpoints, parsed strictly, applied to a datastore of its own and hot-reloaded.
package endpoints

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultNamespace is used for endpoints without a namespace.
const DefaultNamespace = "default"

// Endpoint is one model server listed in the file. The lab writes the file from these too,
// leaving out what the parser defaults.
type Endpoint struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Address     string            `yaml:"address"`
	Port        int               `yaml:"port"`
	MetricsPort int               `yaml:"metricsPort,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// File is the endpoints file document.
type File struct {
	Endpoints []Endpoint `yaml:"endpoints"`
}

// Parse decodes and validates an endpoints file. Unknown fields, missing or malformed values,
// and duplicates are errors naming the line and the field.
func Parse(data []byte) ([]Endpoint, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("endpoints file is empty: want a document with an 'endpoints:' list")
		}
		return nil, fmt.Errorf("endpoints file: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("endpoints file: line %d: only one YAML document is allowed", extra.Line)
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("endpoints file: line %d: want a mapping with an 'endpoints:' list", doc.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k := doc.Content[i]
		if k.Value != "endpoints" {
			return nil, fmt.Errorf("endpoints file: line %d: unknown field %q (only 'endpoints' is allowed)", k.Line, k.Value)
		}
		list = doc.Content[i+1]
	}
	if list == nil {
		return nil, fmt.Errorf("endpoints file: line %d: missing field 'endpoints'", doc.Line)
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		return nil, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("endpoints file: line %d: field 'endpoints' must be a list", list.Line)
	}
	out := make([]Endpoint, 0, len(list.Content))
	names := map[string]int{}
	addrs := map[string]int{}
	for i, n := range list.Content {
		var ep Endpoint
		if err := decodeStrict(n, &ep); err != nil {
			return nil, fmt.Errorf("endpoints file: endpoints[%d] (line %d): %w", i, n.Line, err)
		}
		if err := ep.normalizeAndValidate(); err != nil {
			return nil, fmt.Errorf("endpoints file: endpoints[%d] (line %d): %w", i, n.Line, err)
		}
		key := ep.Namespace + "/" + ep.Name
		if prev, ok := names[key]; ok {
			return nil, fmt.Errorf("endpoints file: endpoints[%d] (line %d): field 'name': %q duplicates endpoints[%d]", i, n.Line, key, prev)
		}
		names[key] = i
		hp := ep.HostPort()
		if prev, ok := addrs[hp]; ok {
			return nil, fmt.Errorf("endpoints file: endpoints[%d] (line %d): fields 'address'/'port': %s duplicates endpoints[%d]", i, n.Line, hp, prev)
		}
		addrs[hp] = i
		out = append(out, ep)
	}
	return out, nil
}

// decodeStrict decodes one mapping node, rejecting fields Endpoint does not have.
func decodeStrict(n *yaml.Node, ep *Endpoint) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("want a mapping with name, address, port")
	}
	known := map[string]bool{"name": true, "namespace": true, "address": true, "port": true,
		"metricsPort": true, "labels": true, "annotations": true}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; !known[k.Value] {
			return fmt.Errorf("line %d: unknown field %q", k.Line, k.Value)
		}
	}
	if err := n.Decode(ep); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s", strings.Join(te.Errors, "; "))
		}
		return err
	}
	return nil
}

func (ep *Endpoint) normalizeAndValidate() error {
	if ep.Name == "" {
		return errors.New("field 'name' is required")
	}
	if errs := validation.IsDNS1123Subdomain(ep.Name); len(errs) > 0 {
		return fmt.Errorf("field 'name' %q: %s", ep.Name, strings.Join(errs, "; "))
	}
	if ep.Namespace == "" {
		ep.Namespace = DefaultNamespace
	}
	if errs := validation.IsDNS1123Label(ep.Namespace); len(errs) > 0 {
		return fmt.Errorf("field 'namespace' %q: %s", ep.Namespace, strings.Join(errs, "; "))
	}
	if ep.Address == "" {
		return errors.New("field 'address' is required (an IPv4 or IPv6 address)")
	}
	ip := net.ParseIP(strings.Trim(ep.Address, "[]"))
	if ip == nil {
		return fmt.Errorf("field 'address' %q: want an IPv4 or IPv6 address", ep.Address)
	}
	ep.Address = ip.String()
	if ep.Port < 1 || ep.Port > 65535 {
		return fmt.Errorf("field 'port' %d: want 1..65535", ep.Port)
	}
	if ep.MetricsPort == 0 {
		ep.MetricsPort = ep.Port
	}
	if ep.MetricsPort < 1 || ep.MetricsPort > 65535 {
		return fmt.Errorf("field 'metricsPort' %d: want 1..65535 (or omit it to use 'port')", ep.MetricsPort)
	}
	for k := range ep.Labels {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("field 'labels' key %q: %s", k, strings.Join(errs, "; "))
		}
	}
	for k := range ep.Annotations {
		if errs := validation.IsQualifiedName(strings.ToLower(k)); len(errs) > 0 {
			return fmt.Errorf("field 'annotations' key %q: %s", k, strings.Join(errs, "; "))
		}
	}
	return nil
}

// HostPort is the serving address, IPv6 bracketed.
func (ep *Endpoint) HostPort() string {
	return net.JoinHostPort(ep.Address, fmt.Sprint(ep.Port))
}

// MetricsHostPort is the scrape address, IPv6 bracketed.
func (ep *Endpoint) MetricsHostPort() string {
	return net.JoinHostPort(ep.Address, fmt.Sprint(ep.MetricsPort))
}
