// Package handoffcompat reads from a pod's labels (and the annotations the EPP mirrors into
// them) what a KV handoff between a prefill pod and a decode pod needs both sides to agree on:
// the KV connector and its transfer protocol, the KV block size, the TP and DP sizes, the model
// and its revision, and the transfer group. Two pods can hand KV to each other when every
// attribute both declare is equal; an attribute one side leaves out constrains nothing, so a
// fleet that declares nothing pairs as it always did.
package handoffcompat

import (
	"sort"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Attr is one attribute of a handoff. Its String is the metrics reason label.
type Attr int

// The attributes, in the order mismatches are reported.
const (
	Connector Attr = iota
	TransferProtocol
	BlockSize
	TPSize
	DPSize
	Model
	Revision
	TransferGroup
	numAttrs
)

// Attrs lists every attribute in report order.
var Attrs = [numAttrs]Attr{Connector, TransferProtocol, BlockSize, TPSize, DPSize, Model, Revision, TransferGroup}

var attrNames = [numAttrs]string{"connector", "transfer_protocol", "block_size", "tp_size", "dp_size", "model", "revision", "transfer_group"}

func (a Attr) String() string {
	if a < 0 || a >= numAttrs {
		return "unknown"
	}
	return attrNames[a]
}

// Label keys. AIBrix's names where AIBrix has one (its KV agent label and its model label);
// llm-d declares none of these on pods, so the rest are pdgate's.
const (
	LabelConnector        = "model.aibrix.ai/kv-connector-type"
	LabelTransferProtocol = "pdgate.io/kv-transfer-protocol"
	LabelBlockSize        = "pdgate.io/kv-block-size"
	LabelTPSize           = "pdgate.io/tp-size"
	LabelDPSize           = "pdgate.io/dp-size"
	LabelModel            = "model.aibrix.ai/name"
	LabelRevision         = "pdgate.io/model-revision"
	LabelTransferGroup    = "pdgate.io/kv-transfer-group"
)

// Keys are the label keys by attribute.
var Keys = [numAttrs]string{LabelConnector, LabelTransferProtocol, LabelBlockSize, LabelTPSize, LabelDPSize,
	LabelModel, LabelRevision, LabelTransferGroup}

// keyAttr maps every label key, and its mirrored annotation key, to its attribute.
type keyAttr struct {
	attr       Attr
	annotation bool
}

var byKey = func() map[string]keyAttr {
	m := make(map[string]keyAttr, 2*numAttrs)
	for i, k := range Keys {
		m[k] = keyAttr{attr: Attr(i)}
		m[protocol.AnnotationLabelPrefix+k] = keyAttr{attr: Attr(i), annotation: true}
	}
	return m
}()

// attrOf maps a label key to its attribute; annotation says it is the mirrored annotation of
// the key. Reading a pod walks its few labels once instead of looking up all sixteen keys.
func attrOf(key string) (a Attr, annotation, ok bool) {
	ka, ok := byKey[key]
	return ka.attr, ka.annotation, ok
}

// Spec is what one pod declares; "" is an attribute it leaves out. The zero Spec declares
// nothing.
type Spec struct {
	v [numAttrs]string
}

// Of reads a pod's labels. A label wins over the annotation of the same key. Values are
// trimmed; the connector and the protocol are lower-cased (AIBrix reads its connector label
// case-insensitively); the three sizes must be positive integers, compared as numbers, and an
// invalid one is left out and listed in invalid (the key=value, in key order), so that a typo
// never splits a fleet. Of allocates nothing for a pod that declares nothing and valid sizes
// written plainly.
func Of(labels map[string]string) (s Spec, invalid []string) {
	for key, raw := range labels {
		i, annotation, ok := attrOf(key)
		if !ok {
			continue
		}
		if annotation {
			if _, labelled := labels[Keys[i]]; labelled {
				continue
			}
		}
		v := strings.TrimSpace(raw)
		if v == "" {
			continue
		}
		switch i {
		case Connector, TransferProtocol:
			v = strings.ToLower(v)
		case BlockSize, TPSize, DPSize:
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				invalid = append(invalid, Keys[i]+"="+raw)
				continue
			}
			if strconv.Itoa(n) != v {
				v = strconv.Itoa(n) // "08" and "8" are one size
			}
		}
		s.v[i] = v
	}
	sort.Strings(invalid)
	return s, invalid
}

// Declares reports whether labels set any of the keys (to anything but ""), without building a
// Spec: the check a hot path makes before doing any work. A blank or invalid value makes it
// true although Of then leaves the attribute out.
func Declares(labels map[string]string) bool {
	for key, v := range labels {
		if _, _, ok := attrOf(key); ok && v != "" {
			return true
		}
	}
	return false
}

// Get returns the declared value of a ("" when left out).
func (s Spec) Get(a Attr) string {
	if a < 0 || a >= numAttrs {
		return ""
	}
	return s.v[a]
}

// With returns s with a set to v (tests and fleets built in code), normalised as Of would.
func (s Spec) With(a Attr, v string) Spec {
	if a >= 0 && a < numAttrs {
		n, _ := Of(map[string]string{Keys[a]: v})
		s.v[a] = n.v[a]
	}
	return s
}

// Empty reports whether s declares nothing.
func (s Spec) Empty() bool { return s == Spec{} }

// Mismatch returns the first attribute (in Attrs order) both specs declare with different
// values, and false when there is none.
func Mismatch(a, b Spec) (Attr, bool) {
	for i := range numAttrs {
		if a.v[i] != "" && b.v[i] != "" && a.v[i] != b.v[i] {
			return i, true
		}
	}
	return 0, false
}

// Compatible reports whether a prefill pod declaring a and a decode pod declaring b can hand
// KV to each other: every attribute both declare is equal. It is symmetric.
func Compatible(a, b Spec) bool {
	_, bad := Mismatch(a, b)
	return !bad
}

// String is the declared attributes as name=value pairs, "none" for an empty spec (logs,
// decision traces).
func (s Spec) String() string {
	var b strings.Builder
	for i := range numAttrs {
		if s.v[i] == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(attrNames[i])
		b.WriteByte('=')
		b.WriteString(s.v[i])
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}
