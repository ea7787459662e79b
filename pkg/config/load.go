package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"

	"github.com/nodegc/nodegc/internal/endpoint"
)

// MaxFileSize bounds what Load reads: a configuration is a few KiB.
const MaxFileSize = 1 << 20

// maxNodes bounds the YAML nodes visited per document, aliases included, so
// that an alias bomb cannot make decoding explode.
const maxNodes = 100000

// Loaded is a decoded, merged and defaulted configuration with what is needed
// to point at the source of a problem.
type Loaded struct {
	// Config is the merged configuration with defaults applied.
	Config *NodeGCConfiguration
	// FromKubelet lists the nodegc field paths whose value was taken from a
	// KubeletConfiguration document.
	FromKubelet []string
	// Warnings are problems that do not stop the agent, such as fields of
	// a KubeletConfiguration that this version of nodegc does not know, in
	// line order, those without a line last.
	Warnings []string

	lines map[string]int
	// flags maps the field paths a command-line flag set (SetByFlag) to it.
	flags map[string]string
}

// SetByFlag records that flag (such as "--metrics-bind-address") gave the
// field at path its value after the file was read: problems with it are
// the flag's, not the file's.
func (l *Loaded) SetByFlag(path, flag string) {
	if l.flags == nil {
		l.flags = map[string]string{}
	}
	l.flags[path] = flag
}

// Line returns the line of the file that set the field at path (as printed
// by field.Path), or 0 when the file did not set it.
func (l *Loaded) Line(path string) int {
	if l == nil {
		return 0
	}
	if n, ok := l.lines[path]; ok {
		return n
	}
	// A map's key (a signal of evictionHard) has its own line.
	if n, ok := l.lines[dottedKeys(path)]; ok {
		return n
	}
	// A validation path may be deeper than what the file spelled out.
	for p := path; ; {
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			return 0
		}
		p = p[:i]
		if n, ok := l.lines[p]; ok {
			return n
		}
	}
}

// dottedKeys returns path, as field.Path prints it, with its map keys
// written as the file's lines record them: "imageGC.evictionHard[nodefs.available]"
// gives "imageGC.evictionHard.nodefs.available". List indexes stay.
func dottedKeys(path string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '[')
		j := strings.IndexByte(path[max(i, 0):], ']') + max(i, 0)
		if i < 0 || j < i {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i])
		if key := path[i+1 : j]; strings.Trim(key, "0123456789") == "" {
			b.WriteString(path[i : j+1])
		} else {
			b.WriteString("." + key)
		}
		path = path[j+1:]
	}
}

// DecodeError lists every problem of a configuration that could not be
// decoded whole, one per entry, each starting with "line N: " when its line
// is known, in line order with those without a line last. Besides what failed
// to decode (unknown fields, wrong types, duplicate keys, documents that are
// not a configuration), it lists the validation problems of what could be
// decoded when the NodeGCConfiguration document was found, in the form
// "line N: <field.Error>" (see Loaded.Problems); those about a field that
// failed to decode are left out.
type DecodeError struct {
	Problems []string
}

func (e *DecodeError) Error() string { return strings.Join(e.Problems, "\n") }

// An Option changes how a configuration is decoded.
type Option func(*decodeOptions)

type decodeOptions struct {
	override func(*Loaded)
}

// WithOverride has override change the configuration once it is decoded,
// merged and defaulted, before it is validated, also where Decode validates
// a file that does not decode whole (see DecodeError): command-line flags
// that replace fields of the file, each recorded with Loaded.SetByFlag so
// that what they fix is not reported and a problem with their value is
// blamed on the flag.
func WithOverride(override func(*Loaded)) Option {
	return func(o *decodeOptions) { o.override = override }
}

// LoadFile reads, decodes and defaults the configuration in path. It does
// not validate: call Validate on the result.
func LoadFile(path string, opts ...Option) (*Loaded, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	defer f.Close()
	return DecodeReader(f, opts...)
}

// DecodeReader reads at most MaxFileSize bytes from r and decodes them.
func DecodeReader(r io.Reader, opts ...Option) (*Loaded, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("reading configuration: %w", err)
	}
	return Decode(data, opts...)
}

// Decode decodes a multi-document YAML configuration: at most one
// NodeGCConfiguration and at most one KubeletConfiguration. Decoding is
// strict: unknown fields, wrong types and duplicate keys are errors naming
// the field and its line. Fields set in the NodeGCConfiguration win over the
// same fields set in the KubeletConfiguration, which win over defaults.
// Defaults are applied to what neither document sets.
//
// A file that decodes gives a *Loaded and nil, not yet validated: call
// Validate on its Config. Otherwise the error is a *DecodeError (or, for
// input too large, a plain error) that lists every problem of the file at
// once: what failed to decode and, when the NodeGCConfiguration document
// was found, what Validate says of the fields that did decode, defaulted and
// merged with a KubeletConfiguration document that decoded without problems.
func Decode(data []byte, opts ...Option) (*Loaded, error) {
	var o decodeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("configuration is larger than %d bytes", MaxFileSize)
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return nil, err
	}
	out := &Loaded{Config: &NodeGCConfiguration{}, lines: map[string]int{}}
	var (
		nodegcDoc, kubeletDoc *document
		problems              []string
		// the nodegc field paths that failed to decode: what Validate
		// says of them is about a value the file did not give
		nodegcBad []string
	)
	for _, d := range docs {
		switch {
		case d.apiVersion == APIVersion && d.kind == Kind:
			if nodegcDoc != nil {
				problems = append(problems, fmt.Sprintf("line %d: a second %s document (the first is at line %d); give one", d.line, Kind, nodegcDoc.line))
				continue
			}
			nodegcDoc = d
			d.refuseNumbersNotDecimal()
			var unknown []string
			docProblems, bad := d.decodeInto(out.Config, func(path, msg string) {
				unknown = append(unknown, msg+kubeletFieldHint(path))
			})
			problems = append(problems, docProblems...)
			problems = append(problems, unknown...)
			spaced, spacedBad := d.whiteSpaceProblems(out.Config)
			problems = append(problems, spaced...)
			nodegcBad = append(bad, spacedBad...)
			out.lines = d.lines
		case d.apiVersion == KubeletAPIVersion && d.kind == KubeletKind:
			if kubeletDoc != nil {
				problems = append(problems, fmt.Sprintf("line %d: a second %s document (the first is at line %d); give one", d.line, KubeletKind, kubeletDoc.line))
				continue
			}
			kubeletDoc = d
		default:
			problems = append(problems, fmt.Sprintf("line %d: unsupported document apiVersion %q kind %q: want apiVersion %q kind %q, or apiVersion %q kind %q",
				d.line, d.apiVersion, d.kind, APIVersion, Kind, KubeletAPIVersion, KubeletKind))
		}
	}
	if len(docs) == 0 {
		problems = append(problems, fmt.Sprintf("no configuration document found: want apiVersion %q kind %q", APIVersion, Kind))
	}
	var kc *kubeletconfigv1beta1.KubeletConfiguration
	if kubeletDoc != nil {
		kc = &kubeletconfigv1beta1.KubeletConfiguration{}
		// A node's own kubelet config may be newer than the type nodegc
		// knows: its unknown fields are warnings, not errors; but not
		// nodegc's own fields, which no kubelet has.
		var misplaced []string
		kubeletProblems, _ := kubeletDoc.decodeInto(kc, func(path, msg string) {
			if nodegcField(path) {
				misplaced = append(misplaced, misplacedField(path, kubeletDoc, nodegcDoc))
				return
			}
			if sections := sectionFields()[path]; len(sections) > 0 {
				misplaced = append(misplaced, misplacedSectionField(path, sections, kubeletDoc, nodegcDoc))
				return
			}
			out.Warnings = append(out.Warnings, fmt.Sprintf("%s (ignored in the %s document)", msg, KubeletKind))
		})
		problems = append(problems, kubeletProblems...)
		if len(kubeletProblems) > 0 {
			kc = nil // not merged: which of its values were meant is unknown
		}
		// The kubelet's values decoded: validation still weighs them.
		problems = append(problems, misplaced...)
	}
	if len(problems) > 0 {
		if nodegcDoc != nil {
			var kubeletLines map[string]int
			if kubeletDoc != nil {
				kubeletLines = kubeletDoc.lines
			}
			problems = append(problems, validateDecoded(out.Config, out.lines, kc, kubeletLines, nodegcBad, o.override)...)
		}
		sortProblems(problems)
		return nil, &DecodeError{Problems: problems}
	}
	if kc != nil {
		var taken map[string]string
		out.FromKubelet, taken = mergeKubelet(out.Config, kc, kubeletDoc.lines, out.lines)
		out.Warnings = append(out.Warnings, kubeletDoc.numbersNotDecimal(taken)...)
		if slices.Contains(out.FromKubelet, "imageGC.evictionHard") {
			out.Warnings = append(out.Warnings, dropUnknownSignals("evictionHard", out.Config.ImageGC.EvictionHard, kubeletDoc.lines)...)
		}
		if slices.Contains(out.FromKubelet, "imageGC.evictionSoft") {
			out.Warnings = append(out.Warnings, dropUnknownSignals("evictionSoft", out.Config.ImageGC.EvictionSoft, kubeletDoc.lines)...)
		}
		// The kubelet sets no ceiling: a value it runs with must not stop
		// nodegc; nodegc's own document is held to the ceiling.
		if d := out.Config.RuntimeRequestTimeout.Duration; d > MaxRuntimeRequestTimeout && slices.Contains(out.FromKubelet, "runtimeRequestTimeout") {
			out.Warnings = append(out.Warnings, fmt.Sprintf("line %d: runtimeRequestTimeout %v of the %s is over nodegc's ceiling: nodegc takes %v "+
				"(a created container is left to start for that and a minute)", kubeletDoc.lines["runtimeRequestTimeout"], d, KubeletKind, MaxRuntimeRequestTimeout))
			out.Config.RuntimeRequestTimeout.Duration = MaxRuntimeRequestTimeout
		}
	}
	SetDefaults(out.Config)
	if o.override != nil {
		o.override(out)
	}
	if kc != nil {
		out.Warnings = append(out.Warnings, out.hiddenImageServiceWarning(kc, kubeletDoc.lines)...)
		out.Warnings = append(out.Warnings, out.hiddenKubeletWarnings(kc, kubeletDoc.lines)...)
	}
	out.Warnings = append(out.Warnings, excludeWarnings(&out.Config.ImageGC, out)...)
	out.Warnings = append(out.Warnings, out.endpointWarnings()...)
	out.Warnings = append(out.Warnings, out.inodeWarnings()...)
	out.Warnings = append(out.Warnings, out.ignoredEventsWarning()...)
	out.Warnings = append(out.Warnings, out.noMinimumAgeWarning()...)
	out.Warnings = append(out.Warnings, out.thresholdGCOffWarning()...)
	out.Warnings = append(out.Warnings, out.fillRateWarning()...)
	out.Warnings = append(out.Warnings, out.profilingOffWarning()...)
	out.Warnings = append(out.Warnings, out.tinyThresholdWarnings()...)
	if kc != nil {
		out.Warnings = append(out.Warnings, kubeletImageGCOnWarning(kc, kubeletDoc)...)
	}
	if kc != nil && kubeletImageGCOff(kc, kubeletDoc.lines) {
		_, high := out.lines["imageGC.highThresholdPercent"]
		_, low := out.lines["imageGC.lowThresholdPercent"]
		// With only a low threshold over the default high one, the
		// validation says what is wrong; the warning would not hold.
		if ig := out.Config.ImageGC; (!high || !low) && *ig.HighThresholdPercent > *ig.LowThresholdPercent {
			out.Warnings = append(out.Warnings, fmt.Sprintf("line %d: imageGCHighThresholdPercent of the %s is 100, its image GC off: "+
				"its thresholds are not taken, and nodegc's image GC runs at highThresholdPercent %d, lowThresholdPercent %d "+
				"(set both in the NodeGCConfiguration document to choose)", kubeletDoc.lines["imageGCHighThresholdPercent"], KubeletKind,
				*ig.HighThresholdPercent, *ig.LowThresholdPercent))
		}
	}
	sortProblems(out.Warnings) // in line order, as problems
	return out, nil
}

// nodegcField says whether path, an unknown field of a
// KubeletConfiguration document, is the name of a top-level field of the
// NodeGCConfiguration (imageGC, containerGC, nodeName, ...): a section of
// nodegc's in the wrong document, not a newer kubelet's field.
func nodegcField(path string) bool {
	if path == "" || strings.ContainsAny(path, ".[") {
		return false
	}
	_, ok := jsonField(reflect.TypeFor[NodeGCConfiguration](), path)
	return ok
}

// whiteSpaceProblems makes a problem of each path or endpoint of c, decoded
// from the NodeGCConfiguration document d, with white space around it (a
// block scalar's newline, a space inside the quotes), which nodegc would
// take as written: a directory made with a newline in its name, an
// endpoint that fails to dial, a log directory never found. It returns the
// problems and their paths.
func (d *document) whiteSpaceProblems(c *NodeGCConfiguration) (problems, bad []string) {
	for _, f := range []struct{ path, value string }{
		{"stateDirectory", c.StateDirectory},
		{"containerRuntimeEndpoint", c.ContainerRuntimeEndpoint},
		{"imageServiceEndpoint", c.ImageServiceEndpoint},
		{"clientConnection.kubeconfig", c.ClientConnection.Kubeconfig},
		{"containerGC.podLogsDirectory", c.ContainerGC.PodLogsDirectory},
		{"containerGC.containerLogsDirectory", c.ContainerGC.ContainerLogsDirectory},
	} {
		if strings.TrimSpace(f.value) == f.value {
			continue
		}
		msg := fmt.Sprintf("%s: %q has white space around it: remove it", f.path, f.value)
		if strings.HasSuffix(f.value, "\n") {
			msg += " (a block scalar, | or >, ends with a newline: write the value on the key's line)"
		}
		if line := d.lines[f.path]; line > 0 {
			msg = fmt.Sprintf("line %d: %s", line, msg)
		}
		problems, bad = append(problems, msg), append(bad, f.path)
	}
	return problems, bad
}

// kubeletFieldHint says, for path, an unknown field of the
// NodeGCConfiguration document at its top or in one of its sections, when
// its name is a KubeletConfiguration field, which of nodegc's fields it is
// (mergeKubelet's), or that nodegc does not take it; else "".
func kubeletFieldHint(path string) string {
	parent, name := splitField(path)
	if strings.ContainsAny(parent, ".[") || strings.Contains(name, "[") || name == "apiVersion" || name == "kind" {
		return ""
	}
	if _, ok := jsonField(reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration](), name); !ok {
		return ""
	}
	if ours, ok := kubeletToNodegc()[name]; ok {
		return fmt.Sprintf(": a %s field; nodegc's is %s (or give the kubelet's configuration as a %s document of its own)", KubeletKind, ours, KubeletKind)
	}
	return fmt.Sprintf(": a %s field, which nodegc does not take", KubeletKind)
}

// kubeletToNodegc maps each KubeletConfiguration field nodegc takes to the
// path of its own field, as mergeKubelet does.
var kubeletToNodegc = sync.OnceValue(func() map[string]string {
	t := reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration]()
	lines := map[string]int{}
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ","); name != "" && name != "-" {
			lines[name] = 1
		}
	}
	_, from := mergeKubelet(&NodeGCConfiguration{}, &kubeletconfigv1beta1.KubeletConfiguration{}, lines, map[string]int{})
	return from
})

// misplacedField says that the field at path, a NodeGCConfiguration field,
// is in the KubeletConfiguration document kubelet, and which document it
// belongs in: nodegc, or a new one when the file has none.
func misplacedField(path string, kubelet, nodegc *document) string {
	return misplaced(path, "a "+Kind+" field", "in "+nodegcDocument(nodegc), kubelet)
}

// misplacedSectionField says that the field at path, at the top of the
// KubeletConfiguration document kubelet, is a field of nodegc's sections
// (their JSON names: imageGC, ...), and where it belongs: under them, in
// nodegc's document, or a new one when the file has none.
func misplacedSectionField(path string, sections []string, kubelet, nodegc *document) string {
	fields := make([]string, len(sections))
	for i, s := range sections {
		fields[i] = s + "." + path
	}
	return misplaced(path, "the field "+strings.Join(fields, " or ")+" of a "+Kind,
		"under "+strings.Join(sections, " or ")+" in "+nodegcDocument(nodegc), kubelet)
}

// nodegcDocument names the NodeGCConfiguration document nodegc, or says
// what to write when the file has none (nil).
func nodegcDocument(nodegc *document) string {
	if nodegc != nil {
		return fmt.Sprintf("the %s document (line %d)", Kind, nodegc.line)
	}
	return fmt.Sprintf("a %s document (apiVersion: %s, kind: %s)", Kind, APIVersion, Kind)
}

// misplaced says that the field at path of the KubeletConfiguration
// document kubelet is what (a field of nodegc's) and belongs where.
func misplaced(path, what, where string, kubelet *document) string {
	msg := fmt.Sprintf("%s: %s, in the %s document (line %d), which has no such field: nodegc would ignore it there; it belongs %s",
		path, what, KubeletKind, kubelet.line, where)
	if line := kubelet.lines[path]; line > 0 {
		msg = fmt.Sprintf("line %d: %s", line, msg)
	}
	return msg
}

// sectionFields maps the JSON name of each field of nodegc's own sections
// (the fields of NodeGCConfiguration whose type is a struct of this
// package: imageGC, containerGC, ownerGC) that the KubeletConfiguration
// does not have to the JSON names of the sections that have it, in the
// order of NodeGCConfiguration's fields: written at the top of a
// KubeletConfiguration document, such a field is nodegc's, out of place
// (exclude, keepNewestPerRepository, maxPerPodContainer, ...), not a newer
// kubelet's.
var sectionFields = sync.OnceValue(func() map[string][]string {
	out := map[string][]string{}
	root, kubelet := reflect.TypeFor[NodeGCConfiguration](), reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration]()
	for i := range root.NumField() {
		sf := root.Field(i)
		section, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if section == "" || sf.Type.Kind() != reflect.Struct || sf.Type.PkgPath() != root.PkgPath() {
			continue
		}
		for j := range sf.Type.NumField() {
			name, _, _ := strings.Cut(sf.Type.Field(j).Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if _, ok := jsonField(kubelet, name); ok {
				continue
			}
			out[name] = append(out[name], section)
		}
	}
	return out
})

// hiddenImageServiceWarning returns a warning, at its line, when the
// NodeGCConfiguration document sets imageServiceEndpoint to "" (the runtime
// endpoint) beside a KubeletConfiguration kc that sets one: nodegc's ""
// wins, as any value its document gives, and asks the runtime endpoint for
// images where the kubelet asks another. kubeletLines are kc's lines.
func (l *Loaded) hiddenImageServiceWarning(kc *kubeletconfigv1beta1.KubeletConfiguration, kubeletLines map[string]int) []string {
	const path = "imageServiceEndpoint"
	line, set := kubeletLines[path]
	if !set || kc.ImageServiceEndpoint == "" || !l.setByNodegcDocument(path) || l.Config.ImageServiceEndpoint != "" {
		return nil
	}
	return []string{l.locate(path, path, fmt.Sprintf("%s: \"\" (the same as containerRuntimeEndpoint) hides the %s's %s %q (line %d): "+
		"nodegc asks for images at %s; remove the line (or write null) to take the kubelet's",
		path, KubeletKind, path, kc.ImageServiceEndpoint, line, l.Config.ContainerRuntimeEndpoint))}
}

// hiddenKubeletWarnings returns a warning, at its line, for each field the
// NodeGCConfiguration document sets to another value than the one nodegc
// would take from the KubeletConfiguration kc's same field: nodegc's wins
// (mergeKubelet), which is easily missed when nodegc's document spells out
// every field (nodegc config defaults, with the node's kubelet config
// appended). A field a flag set, and imageServiceEndpoint
// (hiddenImageServiceWarning), are left out. kubeletLines are kc's lines.
func (l *Loaded) hiddenKubeletWarnings(kc *kubeletconfigv1beta1.KubeletConfiguration, kubeletLines map[string]int) []string {
	kubelets := &NodeGCConfiguration{}
	_, from := mergeKubelet(kubelets, kc, kubeletLines, map[string]int{})
	SetDefaults(kubelets)
	mine, theirs := jsonTree(l.Config), jsonTree(kubelets) // as written, to show
	taken := *kubelets                                     // as nodegc would take it, to compare
	taken.RuntimeRequestTimeout.Duration = min(taken.RuntimeRequestTimeout.Duration, MaxRuntimeRequestTimeout)
	same, other := comparableTree(jsonTree(l.Config)), comparableTree(jsonTree(&taken))
	var out []string
	for kubeletField, path := range from {
		if _, byFlag := l.flagOf(path); path == "imageServiceEndpoint" || byFlag || !l.setByNodegcDocument(path) {
			continue
		}
		if reflect.DeepEqual(treeAt(same, path), treeAt(other, path)) {
			continue
		}
		a, b := treeAt(mine, path), treeAt(theirs, path)
		if strings.HasPrefix(path, "imageGC.eviction") {
			a, b = diskThresholds(a), diskThresholds(b)
		}
		out = append(out, l.locate(path, path, fmt.Sprintf("%s %s hides the %s's %s %s (line %d): remove the line (or write null) to take the kubelet's",
			path, compactJSON(a), KubeletKind, kubeletField, compactJSON(b), kubeletLines[kubeletField])))
	}
	return out
}

// jsonTree returns c as its JSON tree.
func jsonTree(c *NodeGCConfiguration) map[string]any {
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	var tree map[string]any
	if json.Unmarshal(b, &tree) != nil {
		return nil
	}
	return tree
}

// comparableTree rewrites tree, a configuration's JSON tree, so that what
// nodegc reads of the fields the KubeletConfiguration gives is written one
// way: the disk signals of the eviction thresholds only (memory.available
// and the like do not count), each parsed ("15.0%" is "15%"; "0%" and
// "100%" are off), and the paths cleaned, the endpoints' unix:// scheme
// left out. It returns tree.
func comparableTree(tree map[string]any) map[string]any {
	if ig, ok := tree["imageGC"].(map[string]any); ok {
		for _, field := range []string{"evictionHard", "evictionSoft"} {
			out := map[string]any{}
			for s, v := range diskThresholds(ig[field]) {
				switch t, err := ParseEvictionThreshold(v.(string)); {
				case err != nil:
					out[s] = v
				case t.IsPercent && (t.Percent == 0 || t.Percent == 100):
					// Off, as a signal the map leaves out.
				case t.IsPercent:
					out[s] = strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%"
				default:
					out[s] = strconv.FormatUint(t.Bytes, 10)
				}
			}
			ig[field] = out
		}
	}
	for _, field := range []string{"containerRuntimeEndpoint", "imageServiceEndpoint"} {
		if v, ok := tree[field].(string); ok && v != "" {
			tree[field] = path.Clean(strings.TrimPrefix(v, "unix://"))
		}
	}
	if cg, ok := tree["containerGC"].(map[string]any); ok {
		if v, ok := cg["podLogsDirectory"].(string); ok && v != "" {
			cg["podLogsDirectory"] = path.Clean(v)
		}
	}
	return tree
}

// treeAt returns the value at a field path ("imageGC.minimumGCAge") of a
// JSON tree, nil if there is none.
func treeAt(tree map[string]any, path string) any {
	var v any = tree
	for _, name := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[name]
	}
	return v
}

// diskThresholds returns the entries of an eviction threshold map (of a JSON
// tree) on the disk signals nodegc reads.
func diskThresholds(v any) map[string]any {
	m, _ := v.(map[string]any)
	out := map[string]any{}
	for _, s := range diskSignals {
		if v, ok := m[s].(string); ok {
			out[s] = v
		}
	}
	return out
}

// compactJSON writes v as JSON on one line.
func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// kubeletImageGCOff reports whether a KubeletConfiguration sets
// imageGCHighThresholdPercent to 100, which turns its threshold image GC
// off (as when nodegc runs beside it). lines gives the document's lines.
func kubeletImageGCOff(kc *kubeletconfigv1beta1.KubeletConfiguration, lines map[string]int) bool {
	_, set := lines["imageGCHighThresholdPercent"]
	return set && kc.ImageGCHighThresholdPercent != nil && *kc.ImageGCHighThresholdPercent == 100
}

// kubeletImageGCOnWarning returns a warning, at its line in the
// KubeletConfiguration document d, when its image GC is on, by its
// thresholds (imageGCHighThresholdPercent under 100, or unset: 85) or by
// age (imageMaximumGCAge): it and nodegc's race for the same images.
func kubeletImageGCOnWarning(kc *kubeletconfigv1beta1.KubeletConfiguration, d *document) []string {
	var on string
	var line int
	switch {
	case !kubeletImageGCOff(kc, d.lines) && kc.ImageGCHighThresholdPercent != nil:
		on, line = "imageGCHighThresholdPercent "+strconv.Itoa(int(*kc.ImageGCHighThresholdPercent)), d.lines["imageGCHighThresholdPercent"]
	case !kubeletImageGCOff(kc, d.lines):
		on = "imageGCHighThresholdPercent unset: 85"
	case kc.ImageMaximumGCAge.Duration > 0:
		on, line = "imageMaximumGCAge "+kc.ImageMaximumGCAge.Duration.String(), d.lines["imageMaximumGCAge"]
	default:
		return nil
	}
	msg := fmt.Sprintf("the %s's image GC is on (%s): it and nodegc's race for the same images; "+
		"where a nodegc node agent runs, set imageGCHighThresholdPercent: 100 and imageMaximumGCAge: 0s in the kubelet's configuration "+
		"(README, Running beside kubelet)", KubeletKind, on)
	if line := cmp.Or(line, d.line); line > 0 {
		msg = fmt.Sprintf("line %d: %s", line, msg)
	}
	return []string{msg}
}

// dropUnknownSignals removes from thresholds, a KubeletConfiguration's
// evictionHard or evictionSoft (name), the signals the kubelet nodegc knows
// (1.34) does not, with a warning each, at the line of its key: a newer
// kubelet's signal is no error in its own config, as its unknown fields are
// not. lines gives the kubelet document's lines.
func dropUnknownSignals(name string, thresholds map[string]string, lines map[string]int) []string {
	var out []string
	for _, s := range slices.Sorted(maps.Keys(thresholds)) {
		if slices.Contains(kubeletSignals, s) {
			continue
		}
		delete(thresholds, s)
		msg := fmt.Sprintf("%s[%s] of the %s is a signal nodegc does not know (a newer kubelet's?); ignored", name, s, KubeletKind)
		if n := cmp.Or(lines[name+"."+s], lines[name]); n > 0 {
			msg = fmt.Sprintf("line %d: %s", n, msg)
		}
		out = append(out, msg)
	}
	return out
}

// inodeSignals are the eviction signals on inodes.
var inodeSignals = []string{"imagefs.inodesFree", "nodefs.inodesFree"}

// inodeWarnings returns a warning for each evictionHard or evictionSoft
// signal on inodes that is on: nodegc reads its value but frees bytes
// only, as the kubelet's image GC does.
func (l *Loaded) inodeWarnings() []string {
	var out []string
	l.Config.ImageGC.eachThreshold(inodeSignals, func(field, s, v string) {
		if signalOff(v) {
			return
		}
		msg := fmt.Sprintf("imageGC.%s[%s]: %s is a signal on inodes; nodegc's image GC frees bytes, not inodes, as the kubelet's image GC does "+
			"(the kubelet's eviction manager removes unused images itself when inodes run short)", field, s, v)
		out = append(out, l.locate("imageGC."+field, "imageGC."+field+"."+s, msg))
	})
	return out
}

// setByNodegcDocument says whether the NodeGCConfiguration document sets
// the field at path, not the KubeletConfiguration document.
func (l *Loaded) setByNodegcDocument(path string) bool {
	_, set := l.lines[path]
	return set && !slices.Contains(l.FromKubelet, path)
}

// tinyQuantity is the quantity under which a disk eviction threshold is
// taken for a mistake (a fraction meant as a percentage: "0.15" for 15%).
const tinyQuantity = 1 << 20

// tinyThresholdWarnings returns a warning, at its line, for each disk
// eviction threshold written as a quantity under tinyQuantity that is not
// zero: a few bytes, which the kubelet never reaches before the disk is
// full, so that nodegc's early start, its warning at start and the eviction
// alert are off by it. The kubelet takes it as written, and so does nodegc.
func (l *Loaded) tinyThresholdWarnings() []string {
	var out []string
	l.Config.ImageGC.eachThreshold(diskSignals, func(field, s, v string) {
		th, err := ParseEvictionThreshold(v)
		if err != nil || th.IsPercent || th.Bytes == 0 || th.Bytes >= tinyQuantity {
			return
		}
		msg := fmt.Sprintf("imageGC.%s[%s]: %q is a quantity of %d byte(s), which the kubelet never reaches before the disk is full; "+
			`a percentage is written "15%%"`, field, s, v, th.Bytes)
		out = append(out, l.locate("imageGC."+field, "imageGC."+field+"."+s, msg))
	})
	return out
}

// thresholdGCOffWarning returns a warning, at its line, when nodegc's
// document sets imageGC.highThresholdPercent to 100: its disk-threshold
// image GC is off (as the kubelet's is at 100).
func (l *Loaded) thresholdGCOffWarning() []string {
	const path = "imageGC.highThresholdPercent"
	if !l.setByNodegcDocument(path) {
		return nil
	}
	if h := l.Config.ImageGC.HighThresholdPercent; h == nil || *h != 100 {
		return nil
	}
	return []string{l.locate(path, path, path+": 100 turns nodegc's disk-threshold image GC off: no image is removed for disk space "+
		"(only past maximumGCAge, if set), and under disk pressure the kubelet's eviction removes images instead")}
}

// fillRateWarning returns a warning, at its line, when
// imageGC.diskCheckInterval is too long for imageGC.fillRateHorizon, which
// is on: the image GC takes the fill rate from three disk readings within
// FillRateWindow, which readings every diskCheckInterval give only when it
// is under half of it (at half, the third reading is as old as the window,
// and lost to the timing half of the time). Readings after the runtime's
// writes (containerd's) still give one during a pull.
func (l *Loaded) fillRateWarning() []string {
	const path = "imageGC.diskCheckInterval"
	ig := l.Config.ImageGC
	if ig.FillRateHorizon == nil || ig.FillRateHorizon.Duration <= 0 || 2*ig.DiskCheckInterval.Duration < FillRateWindow {
		return nil
	}
	return []string{l.locate(path, path, fmt.Sprintf("%s: %v is too long for imageGC.fillRateHorizon (%v): the fill rate is measured "+
		"from three disk readings within %v, so at one reading every %v or more the early start before the high threshold is off "+
		"(but while the runtime's writes are followed: containerd's, once its stream is open); "+
		"write a diskCheckInterval under %v, or fillRateHorizon: 0s to turn it off",
		path, ig.DiskCheckInterval.Duration, ig.FillRateHorizon.Duration, FillRateWindow, FillRateWindow/2, FillRateWindow/2))}
}

// profilingOffWarning returns a warning, at its line, when
// enableProfilingHandler is on with metricsBindAddress "0" (off), where the
// profiles would be served: none is.
func (l *Loaded) profilingOffWarning() []string {
	const path = "enableProfilingHandler"
	if !l.Config.EnableProfilingHandler || l.Config.MetricsBindAddress != "0" {
		return nil
	}
	return []string{l.locate(path, path, path+`: true serves Go's profiles on metricsBindAddress, which is "0" (off): `+
		"no profile is served; give metricsBindAddress an address to serve them")}
}

// noMinimumAgeWarning returns a warning, at its line, when the
// NodeGCConfiguration document sets imageGC.minimumGCAge to 0: no minimum
// age, where the kubelet reads its imageMinimumGCAge 0s (kubeadm writes it
// into every node's config) as its 2m default, as nodegc reads it in a
// KubeletConfiguration document.
func (l *Loaded) noMinimumAgeWarning() []string {
	const path = "imageGC.minimumGCAge"
	if !l.setByNodegcDocument(path) {
		return nil
	}
	if age := l.Config.ImageGC.MinimumGCAge; age == nil || age.Duration != 0 {
		return nil
	}
	return []string{l.locate(path, path, path+": 0s is no minimum age: an image may be removed as soon as it is listed "+
		"(the kubelet reads its imageMinimumGCAge 0s as its 2m default); write 1s for almost none, or leave it unset for the default")}
}

// ignoredEventsWarning returns a warning, at its line, when the file gives
// ownerGC.gcIgnoredResources without the default events entries: the list
// replaces the defaults, so the owner GC then watches every Event of the
// cluster, which kube-controller-manager's collector leaves out.
func (l *Loaded) ignoredEventsWarning() []string {
	const path = "ownerGC.gcIgnoredResources"
	if _, set := l.lines[path]; !set {
		return nil
	}
	var missing []string
	for _, gr := range DefaultIgnoredResources() {
		if !slices.Contains(l.Config.OwnerGC.GCIgnoredResources, gr) {
			missing = append(missing, fmt.Sprintf("{group: %q, resource: %s}", gr.Group, gr.Resource))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	them := "them"
	if len(missing) == 1 {
		them = "it"
	}
	return []string{l.locate(path, path, fmt.Sprintf("%s leaves out %s: the list replaces the default, so the owner GC watches every Event "+
		"of the cluster (kube-controller-manager's leaves them out); add %s to keep them out", path, strings.Join(missing, " and "), them))}
}

// endpointWarnings returns a warning for each runtime endpoint written in a
// form the kubelet accepts but calls deprecated (a bare path), with its
// line and, when it came from there, the KubeletConfiguration document.
func (l *Loaded) endpointWarnings() []string {
	var out []string
	for _, f := range []struct{ path, value string }{
		{"containerRuntimeEndpoint", l.Config.ContainerRuntimeEndpoint},
		{"imageServiceEndpoint", l.Config.ImageServiceEndpoint},
	} {
		w := endpoint.Warning(f.value)
		if w == "" {
			continue
		}
		out = append(out, l.locate(f.path, f.path, fmt.Sprintf("%s: %q is %s", f.path, f.value, w)))
	}
	return out
}

// mergeKubelet copies the KubeletConfiguration fields nodegc honours into c
// where the nodegc document did not set them, or set them to the zero value
// that SetDefaults replaces ("" for containerRuntimeEndpoint and
// containerGC.podLogsDirectory, 0 for runtimeRequestTimeout: "the default",
// which would otherwise hide the kubelet's value behind nodegc's default),
// and returns the nodegc paths it filled and, by the kubelet's field each
// came from, the same paths. imageServiceEndpoint "" is a value of its own
// (the runtime endpoint's) and wins (see hiddenImageServiceWarning).
func mergeKubelet(c *NodeGCConfiguration, kc *kubeletconfigv1beta1.KubeletConfiguration,
	kubeletLines, nodegcLines map[string]int) (taken []string, from map[string]string) {
	from = map[string]string{}
	// defaulted: the nodegc document's value, if it sets one, is the zero
	// SetDefaults replaces.
	takeUnlessGiven := func(kubeletField, nodegcPath string, defaulted bool, apply func()) {
		if _, set := kubeletLines[kubeletField]; !set {
			return
		}
		if _, set := nodegcLines[nodegcPath]; set && !defaulted {
			return
		}
		apply()
		nodegcLines[nodegcPath] = kubeletLines[kubeletField]
		// The lines of its entries (an evictionHard's signals) too.
		for p, line := range kubeletLines {
			if rest, ok := strings.CutPrefix(p, kubeletField+"."); ok {
				nodegcLines[nodegcPath+"."+rest] = line
			}
		}
		taken = append(taken, nodegcPath)
		from[kubeletField] = nodegcPath
	}
	take := func(kubeletField, nodegcPath string, apply func()) {
		takeUnlessGiven(kubeletField, nodegcPath, false, apply)
	}
	// A kubelet whose image GC is off (high 100: nodegc runs beside it)
	// says nothing of the thresholds nodegc's should have.
	if !kubeletImageGCOff(kc, kubeletLines) {
		take("imageGCHighThresholdPercent", "imageGC.highThresholdPercent", func() { c.ImageGC.HighThresholdPercent = kc.ImageGCHighThresholdPercent })
		take("imageGCLowThresholdPercent", "imageGC.lowThresholdPercent", func() { c.ImageGC.LowThresholdPercent = kc.ImageGCLowThresholdPercent })
	}
	take("imageMinimumGCAge", "imageGC.minimumGCAge", func() {
		// The kubelet reads 0 as its default (kubeadm writes
		// imageMinimumGCAge: 0s into every node's config), not as "none".
		if d := kc.ImageMinimumGCAge; d.Duration != 0 {
			c.ImageGC.MinimumGCAge = &d
		}
	})
	take("imageMaximumGCAge", "imageGC.maximumGCAge", func() { d := kc.ImageMaximumGCAge; c.ImageGC.MaximumGCAge = &d })
	take("evictionHard", "imageGC.evictionHard", func() {
		c.ImageGC.EvictionHard = maps.Clone(kc.EvictionHard)
		if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
			// The kubelet fills the default thresholds the map leaves out.
			for signal, v := range DefaultEvictionHard() {
				if _, set := c.ImageGC.EvictionHard[signal]; !set {
					c.ImageGC.EvictionHard[signal] = v
				}
			}
		}
	})
	// The kubelet has no default soft thresholds to merge.
	take("evictionSoft", "imageGC.evictionSoft", func() { c.ImageGC.EvictionSoft = maps.Clone(kc.EvictionSoft) })
	takeUnlessGiven("containerRuntimeEndpoint", "containerRuntimeEndpoint", c.ContainerRuntimeEndpoint == "",
		func() { c.ContainerRuntimeEndpoint = kc.ContainerRuntimeEndpoint })
	take("imageServiceEndpoint", "imageServiceEndpoint", func() { c.ImageServiceEndpoint = kc.ImageServiceEndpoint })
	takeUnlessGiven("podLogsDir", "containerGC.podLogsDirectory", c.ContainerGC.PodLogsDirectory == "",
		func() { c.ContainerGC.PodLogsDirectory = kc.PodLogsDir })
	// The kubelet's deadline for a container's start, which decides how
	// long a created container may still be starting (the container GC's
	// start grace). The kubelet reads 0 as its default.
	takeUnlessGiven("runtimeRequestTimeout", "runtimeRequestTimeout", c.RuntimeRequestTimeout.Duration == 0, func() {
		if d := kc.RuntimeRequestTimeout; d.Duration != 0 {
			c.RuntimeRequestTimeout = d
		}
	})
	return taken, from
}

// document is one YAML document turned into a JSON tree, with the line of
// every field path.
type document struct {
	line       int
	apiVersion string
	kind       string
	tree       map[string]any
	lines      map[string]int
	// problems found while reading the YAML (duplicate keys, bad keys);
	// decoding goes on so that every problem is reported at once.
	problems []string
	// bad are the field paths whose value the file gives but the tree
	// does not hold as given (a duplicate key, a number JSON cannot carry).
	bad []string
	// numbers are the numbers written other than in decimal.
	numbers []writtenNumber
}

// writtenNumber is a number the file writes with a leading 0 (070) or in
// another base (0x55, 0o70, 0b101). YAML 1.1, which the kubelet and Helm
// read (sigs.k8s.io/yaml), and go.yaml.in/yaml/v3 read a leading 0 as
// octal: 070 is 56, although YAML 1.2's core schema reads 70.
type writtenNumber struct {
	path string
	line int
	text string
	// value is what YAML 1.1 reads: an int, or a float64 for a leading 0
	// before digits that are not octal (080 is 80).
	value any
}

var (
	leadingZero = regexp.MustCompile(`^[-+]?0[0-9]+$`)
	basePrefix  = regexp.MustCompile(`^[-+]?0[xXoObB]`)
)

// digits returns the number as written without the underscores that the
// YAML library drops before reading it.
func (n writtenNumber) digits() string { return strings.ReplaceAll(n.text, "_", "") }

// reading says how the number is read, with its value.
func (n writtenNumber) reading() string {
	digits := strings.TrimLeft(n.digits(), "+-")
	switch strings.ToLower(digits[:2]) {
	case "0x":
		return fmt.Sprintf("a hexadecimal number (%v)", n.value)
	case "0o":
		return fmt.Sprintf("an octal number (%v)", n.value)
	case "0b":
		return fmt.Sprintf("a binary number (%v)", n.value)
	}
	if strings.Trim(digits, "01234567") != "" {
		return "a leading 0 is read as octal where the digits allow it (070 is 56)"
	}
	return fmt.Sprintf("a leading 0 is read as octal (%v)", n.value)
}

// fix says what to write instead: the value read, and, for a leading 0
// read as octal, the decimal the digits spell, given to or (such as
// "%s (or %s)") with the decimal first.
func (n writtenNumber) fix(or string) string {
	read := fmt.Sprint(n.value)
	if !leadingZero.MatchString(n.digits()) {
		return read
	}
	sign, digits := "", strings.TrimPrefix(n.digits(), "+")
	if rest, ok := strings.CutPrefix(digits, "-"); ok {
		sign, digits = "-", rest
	}
	decimal := sign + strings.TrimLeft(digits, "0")
	if decimal == sign {
		decimal = "0"
	}
	if decimal == read {
		return read
	}
	return fmt.Sprintf(or, decimal, read)
}

// refuseNumbersNotDecimal makes a problem of each number of a number field
// of the NodeGCConfiguration document d that is written with a leading 0
// or in another base: its value is not what an operator who zero-pads
// means, and nodegc takes whole numbers in decimal only.
func (d *document) refuseNumbersNotDecimal() {
	for _, n := range d.numbers {
		if !isNumber(fieldType(reflect.TypeFor[*NodeGCConfiguration](), strings.Split(n.path, "."))) {
			continue // a type error, or an unknown field, says the rest
		}
		d.problems = append(d.problems, fmt.Sprintf("line %d: %s: %s: %s; write %s", n.line, n.path, n.text, n.reading(), n.fix("%s (or %s)")))
		d.bad = append(d.bad, n.path)
	}
}

// numbersNotDecimal returns a warning for each number of the
// KubeletConfiguration document d written with a leading 0 or in another
// base, of the fields nodegc took from it (taken: the nodegc path by the
// kubelet's field): nodegc reads them as the kubelet does.
func (d *document) numbersNotDecimal(taken map[string]string) []string {
	var out []string
	for _, n := range d.numbers {
		if _, ok := taken[n.path]; !ok {
			continue
		}
		out = append(out, fmt.Sprintf("line %d: %s: %s of the %s: %s; nodegc takes %v, as the kubelet does (write %s)",
			n.line, n.path, n.text, KubeletKind, n.reading(), n.value, n.fix("%s or %s")))
	}
	return out
}

// isNumber says whether t is an integer or a floating-point type.
func isNumber(t reflect.Type) bool {
	return t != nil && (t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 || t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64)
}

func splitDocuments(data []byte) ([]*document, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*document
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			problems := []string{"invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
			if line := laterBOM(data); line > 0 {
				// Before a comment or a ---, where the parser fails
				// without naming it.
				problems = append([]string{fmt.Sprintf("line %d: a byte order mark (U+FEFF): remove it "+
					"(it is allowed only at the start of the file)", line)}, problems...)
			}
			return nil, &DecodeError{Problems: problems}
		}
		root := &n
		if root.Kind == yaml.DocumentNode {
			if len(root.Content) == 0 {
				continue
			}
			root = root.Content[0]
		}
		if isNull(root) {
			continue // an empty document between two ---
		}
		c := &converter{lines: map[string]int{}, yaml11Booleans: isKubeletDocument(root)}
		v, err := c.convert(root, "")
		if err != nil {
			return nil, &DecodeError{Problems: []string{err.Error()}}
		}
		tree, ok := v.(map[string]any)
		if !ok {
			return nil, &DecodeError{Problems: []string{fmt.Sprintf("line %d: a configuration document must be a mapping", root.Line)}}
		}
		d := &document{line: root.Line, tree: tree, lines: c.lines, problems: c.problems, bad: c.bad, numbers: c.numbers}
		d.apiVersion, _ = tree["apiVersion"].(string)
		d.kind, _ = tree["kind"].(string)
		docs = append(docs, d)
	}
}

// laterBOM returns the line of the first byte order mark of data (UTF-8)
// that does not start it, or 0.
func laterBOM(data []byte) int {
	i := bytes.Index(data[min(len(data), 1):], []byte(bom))
	if i < 0 {
		return 0
	}
	return bytes.Count(data[:i+1], []byte("\n")) + 1
}

// converter turns a YAML node tree into plain JSON values, recording the line
// of every mapping key and the numbers not written in decimal, and
// reporting duplicate keys.
type converter struct {
	lines    map[string]int
	problems []string
	bad      []string
	numbers  []writtenNumber
	visited  int
	// yaml11Booleans reads a plain yes, no, on, off, y or n (any case
	// YAML 1.1 allows) as a boolean, as the kubelet reads its
	// configuration (sigs.k8s.io/yaml); YAML 1.2, which nodegc's own
	// document follows, reads them as strings.
	yaml11Booleans bool
}

// yaml11Booleans are the plain scalars YAML 1.1 reads as booleans and
// YAML 1.2's core schema as strings.
var yaml11Booleans = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// isKubeletDocument says whether root is a mapping whose kind is
// KubeletKind.
func isKubeletDocument(root *yaml.Node) bool {
	if root.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k, v := root.Content[i], root.Content[i+1]; strings.TrimPrefix(k.Value, bom) == "kind" && v.Kind == yaml.ScalarNode && v.Value == KubeletKind {
			return true
		}
	}
	return false
}

func (c *converter) convert(n *yaml.Node, path string) (any, error) {
	c.visited++
	if c.visited > maxNodes {
		return nil, fmt.Errorf("configuration has more than %d YAML nodes (aliases included)", maxNodes)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unresolved alias", n.Line)
		}
		return c.convert(n.Alias, path)
	case yaml.MappingNode:
		obj := make(map[string]any, len(n.Content)/2)
		firstLine := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				c.problems = append(c.problems, fmt.Sprintf("line %d: %s: mapping keys must be strings", k.Line, orRoot(path)))
				continue
			}
			if k.Tag == "!!merge" {
				c.problems = append(c.problems, fmt.Sprintf("line %d: %s: YAML merge keys (<<) are not supported", k.Line, orRoot(path)))
				continue
			}
			key := k.Value
			// A byte order mark is taken for one at the start of the
			// file only (cat a.yaml b.yaml, b saved with one): it
			// becomes part of a later document's first key.
			if rest, ok := strings.CutPrefix(key, bom); ok && k.Style&quotedStyles == 0 {
				c.problems = append(c.problems, fmt.Sprintf("line %d: a byte order mark (U+FEFF) before %q: remove it "+
					"(it is allowed only at the start of the file)", k.Line, rest))
				key = rest
			}
			child := joinPath(path, key)
			if first, dup := firstLine[key]; dup {
				c.problems = append(c.problems, fmt.Sprintf("line %d: %s: duplicate key (first set at line %d)", k.Line, child, first))
				c.bad = append(c.bad, child)
				continue
			}
			firstLine[key] = k.Line
			// A null value leaves the field unset, as Kubernetes reads it:
			// it has no line, so a KubeletConfiguration's value (or the
			// default) applies.
			if !isNull(v) {
				c.lines[child] = k.Line
			}
			cv, err := c.convert(v, child)
			if err != nil {
				return nil, err
			}
			obj[key] = cv
		}
		return obj, nil
	case yaml.SequenceNode:
		list := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			child := path + "[" + strconv.Itoa(i) + "]"
			c.lines[child] = item.Line
			cv, err := c.convert(item, child)
			if err != nil {
				return nil, err
			}
			list = append(list, cv)
		}
		return list, nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", n.Line, orRoot(path), err)
		}
		if f, ok := v.(float64); ok {
			if _, err := json.Marshal(f); err != nil {
				c.problems = append(c.problems, fmt.Sprintf("line %d: %s: %s is not a valid number here", n.Line, orRoot(path), n.Value))
				c.bad = append(c.bad, path)
				return nil, nil
			}
		}
		if b, ok := yaml11Booleans[n.Value]; ok && c.yaml11Booleans && n.Style == 0 {
			return b, nil
		}
		if _, ok := v.(string); !ok && n.Tag == "!!timestamp" {
			return n.Value, nil // keep dates as written; no field of ours takes one
		}
		// The YAML library drops the _ of a number before reading it
		// (0_60 is 060, octal): check the digits it reads.
		if tag, digits := n.ShortTag(), strings.ReplaceAll(n.Value, "_", ""); (tag == "!!int" || tag == "!!float") && n.Style&quotedStyles == 0 &&
			(leadingZero.MatchString(digits) || basePrefix.MatchString(digits)) {
			c.numbers = append(c.numbers, writtenNumber{path: path, line: n.Line, text: n.Value, value: v})
		}
		return v, nil
	default:
		return nil, fmt.Errorf("line %d: %s: unsupported YAML node", n.Line, orRoot(path))
	}
}

// bom is the byte order mark, U+FEFF.
const bom = "\ufeff"

// quotedStyles are the styles of a scalar that is a string as written.
const quotedStyles = yaml.SingleQuotedStyle | yaml.DoubleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle

// isNull says whether n is a null scalar (null, ~, or nothing), through an
// alias.
func isNull(n *yaml.Node) bool {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// decodeInto strictly decodes the document into target. Unknown fields are
// problems, or, when unknown is set, passed to it instead: their field path
// and the message that names it. Type errors name the field they concern. When some fields fail to decode, target holds every
// other field of the document, and bad lists the field paths (as field.Path
// prints them) whose value target does not hold as the file gives it: those
// that failed to decode, duplicate keys, numbers JSON cannot carry. A bad
// path "" means that what failed could not be told apart from the rest.
func (d *document) decodeInto(target any, unknown func(path, msg string)) (problems, bad []string) {
	problems = slices.Clone(d.problems)
	bad = slices.Clone(d.bad)
	strictErrs, err := unmarshalStrict(d.tree, target)
	if err != nil {
		// Name every field that fails to decode, then decode the rest
		// again into a zeroed target: a failed decode leaves target
		// partly written, and the second pass also finds the unknown
		// fields the failure hid.
		located, badPaths := d.locate(target, d.tree, nil)
		if len(located) == 0 {
			located = []string{fmt.Sprintf("line %d: %s", d.line, cleanJSONError(err))}
		}
		problems = append(problems, located...)
		for _, p := range badPaths {
			bad = append(bad, strings.Join(p, "."))
		}
		reflect.ValueOf(target).Elem().SetZero()
		strictErrs, err = unmarshalStrict(withoutPaths(d.tree, badPaths), target)
		if err != nil {
			bad = append(bad, "")
		}
	}
	for _, se := range strictErrs {
		msg, path := se.Error(), ""
		var fe sigsjson.FieldError
		if errors.As(se, &fe) {
			path = fe.FieldPath()
			msg = fmt.Sprintf("%s: unknown field", path)
			if line := d.lines[path]; line > 0 {
				msg = fmt.Sprintf("line %d: %s", line, msg)
			}
		}
		if unknown != nil {
			unknown(path, msg)
			continue
		}
		problems = append(problems, msg)
	}
	return problems, bad
}

func unmarshalStrict(tree map[string]any, target any) ([]error, error) {
	data, err := json.Marshal(tree)
	if err != nil {
		return nil, err
	}
	return sigsjson.UnmarshalStrict(data, target)
}

// locate finds every field whose value alone fails to decode into target's
// type, by decoding each field on its own, deepest first. It returns the
// problems and the paths of the failing fields. A list's elements that fail
// are named each (imageGC.exclude[0]), and the list is the failing field.
// It is only called once a decode has failed, so its cost does not matter.
func (d *document) locate(target any, obj map[string]any, prefix []string) ([]string, [][]string) {
	var (
		out []string
		bad [][]string
	)
	rt := reflect.TypeOf(target)
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		path := append(slices.Clone(prefix), k)
		err := decodesAlone(target, path, obj[k])
		if err == nil {
			continue
		}
		list := isList(fieldType(rt, path))
		// A mapping given for a list is the list's problem, not its keys'.
		if child, ok := obj[k].(map[string]any); ok && !list {
			if deeper, deeperBad := d.locate(target, child, path); len(deeper) > 0 {
				out = append(out, deeper...)
				bad = append(bad, deeperBad...)
				continue
			}
		}
		bad = append(bad, path)
		if elems, ok := obj[k].([]any); ok && list {
			var failed []string
			for i, elem := range elems {
				if err := decodesAlone(target, path, []any{elem}); err != nil {
					failed = append(failed, d.describe(rt, path, i, err, typeHint(rt, path, elem)))
				}
			}
			if len(failed) > 0 {
				out = append(out, failed...)
				continue
			}
		}
		hint := typeHint(rt, path, obj[k])
		if list {
			hint = listHint(obj[k]) // not a list: an element of the list's type, most often
		}
		out = append(out, d.describe(rt, path, -1, err, hint))
	}
	return out, bad
}

// listHint says how to write a list for value, given where one is wanted:
// a string (exclude: nginx) as ["nginx"] or a line "- nginx" each.
func listHint(value any) string {
	switch v := value.(type) {
	case string:
		return fmt.Sprintf(`want a list: write [%q] or one "- %s" per line`, v, v)
	case map[string]any:
		return `want a list: write [{...}], or "- " before each entry, one per line`
	}
	return `want a list: write [...], or "- " before each entry, one per line`
}

// isList says whether t is a slice type.
func isList(t reflect.Type) bool { return t != nil && t.Kind() == reflect.Slice }

// decodesAlone decodes value at path into a new value of target's type,
// with nothing else.
func decodesAlone(target any, path []string, value any) error {
	sub := value
	for i := len(path) - 1; i >= 0; i-- {
		sub = map[string]any{path[i]: sub}
	}
	data, err := json.Marshal(sub)
	if err != nil {
		return nil // not a value the file can give
	}
	return sigsjson.UnmarshalCaseSensitivePreserveInts(data, newOfSameType(target))
}

// withoutPaths returns a copy of tree without the fields at paths.
func withoutPaths(tree map[string]any, paths [][]string) map[string]any {
	out := maps.Clone(tree)
	for _, p := range paths {
		if len(p) == 1 {
			delete(out, p[0])
			continue
		}
		if child, ok := out[p[0]].(map[string]any); ok {
			out[p[0]] = withoutPaths(child, [][]string{p[1:]})
		}
	}
	return out
}

// describe says why the field at path of t, or its element elem if not
// negative, failed to decode; hint, if any, says what the field takes, for
// a value of the wrong type.
func (d *document) describe(t reflect.Type, path []string, elem int, err error, hint string) string {
	p, shown := strings.Join(path, "."), displayPath(t, path)
	if elem >= 0 {
		p += "[" + strconv.Itoa(elem) + "]"
		shown += "[" + strconv.Itoa(elem) + "]"
	}
	msg := fmt.Sprintf("%s: %s", shown, cleanJSONError(err))
	if hint != "" && strings.Contains(msg, "cannot unmarshal") {
		msg += " (" + hint + ")"
	}
	if line := d.lines[p]; line > 0 {
		msg = fmt.Sprintf("line %d: %s", line, msg)
	}
	return msg
}

var durationType = reflect.TypeFor[metav1.Duration]()

// displayPath writes path (JSON names) in t as validation's field.Path
// does: a map's key in brackets (evictionHard[imagefs.available]).
func displayPath(t reflect.Type, path []string) string {
	var b strings.Builder
	for _, name := range path {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t != nil && t.Kind() == reflect.Map:
			b.WriteString("[" + name + "]")
			t = t.Elem()
			continue
		case b.Len() > 0:
			b.WriteString(".")
		}
		b.WriteString(name)
		if t == nil || t.Kind() != reflect.Struct {
			t = nil
			continue
		}
		if f, ok := jsonField(t, name); ok {
			t = f.Type
		} else {
			t = nil
		}
	}
	return b.String()
}

// fieldType returns the type of the field at path (JSON names) in t, or nil
// when path names no field of it (a map's key, a list's element).
func fieldType(t reflect.Type, path []string) reflect.Type {
	for _, name := range path {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct {
			return nil
		}
		f, ok := jsonField(t, name)
		if !ok {
			return nil
		}
		t = f.Type
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// jsonField finds the field of struct t that JSON names name, through
// inlined (embedded) structs.
func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name {
			return f, true
		}
		if tag == "" && f.Anonymous {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if inner, ok := jsonField(ft, name); ok {
					return inner, true
				}
			}
		}
	}
	return reflect.StructField{}, false
}

// typeHint says what the field at path of the document type root takes,
// for value, of the wrong type: a duration is a string with a unit, a
// bind address of nodegc's a quoted ":PORT", a percentage a bare number, a
// boolean true or false (not YAML 1.1's yes or on), another string of
// nodegc's a quoted one, an eviction threshold a quoted percentage or
// quantity. "" for other fields, whose error names the type well enough.
func typeHint(root reflect.Type, path []string, value any) string {
	if len(path) == 0 {
		return ""
	}
	name := path[len(path)-1]
	if len(path) >= 2 && (path[len(path)-2] == "evictionHard" || path[len(path)-2] == "evictionSoft") {
		if m := fieldType(root, path[:len(path)-1]); m != nil && m.Kind() == reflect.Map && isJSONNumber(value) {
			return `want a quoted percentage such as "15%" or a quantity such as "10Gi"`
		}
	}
	t := fieldType(root, path)
	if t == nil {
		return ""
	}
	if _, list := value.([]any); isList(t) && !list {
		t = t.Elem() // value is an element of the list
	}
	nodegc := root == reflect.TypeFor[*NodeGCConfiguration]()
	str, isString := value.(string)
	// Quoted (Helm's quote): what the field takes, but for the quotes.
	switch {
	case isString && t.Kind() == reflect.Bool && yaml12Booleans[str]:
		return fmt.Sprintf("want true or false: unquote it; %q is a string", str)
	case isString && isNumber(t) && quotedNumber.MatchString(str) && strings.HasSuffix(name, "Percent"):
		return fmt.Sprintf("want a whole number from 0 to 100: unquote it; %q is a string", str)
	case isString && isNumber(t) && quotedNumber.MatchString(str):
		return fmt.Sprintf("want a number: unquote it; %q is a string", str)
	}
	switch {
	case t == durationType:
		return `want a duration string with a unit, such as "90s", "2m" or "12h45m"; a bare number has none`
	case nodegc && t.Kind() == reflect.String && strings.HasSuffix(name, "BindAddress"):
		return `want a quoted "host:port" or ":port", such as ":10281", or "0" to disable`
	case strings.HasSuffix(name, "Percent") && t.Kind() >= reflect.Int && t.Kind() <= reflect.Float64:
		return `want a whole number from 0 to 100, without "%"`
	case t.Kind() == reflect.Bool && isString:
		return "want true or false; yes, no, on and off are strings in YAML 1.2, booleans only in YAML 1.1, as Helm reads values"
	case t.Kind() == reflect.Bool:
		return "want true or false"
	case nodegc && t.Kind() == reflect.String && isJSONNumber(value):
		return "want a string: quote it; unquoted, YAML reads it as a number"
	case nodegc && t.Kind() == reflect.String:
		if _, ok := value.(bool); ok {
			return "want a string: quote it; unquoted, YAML reads it as a boolean"
		}
	}
	return ""
}

// yaml12Booleans are the plain scalars YAML 1.2's core schema reads as
// booleans.
var yaml12Booleans = map[string]bool{"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true}

// quotedNumber matches a string that, unquoted, YAML reads as a decimal
// number.
var quotedNumber = regexp.MustCompile(`^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$`)

// isJSONNumber says whether v, a value of a document's tree, is a number.
func isJSONNumber(v any) bool {
	switch v.(type) {
	case int, int64, uint64, float64:
		return true
	}
	return false
}

var goStructField = regexp.MustCompile(`into Go (?:struct field \S+|value) of type (\S+)`)

// cleanJSONError turns encoding/json's wording into one an operator reads.
func cleanJSONError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "json: ")
	msg = goStructField.ReplaceAllString(msg, "into a value of type $1")
	if strings.HasPrefix(msg, "time: ") {
		msg += ` (want a duration such as "90s", "2m" or "12h45m")`
	}
	return msg
}

func newOfSameType(target any) any {
	return reflect.New(reflect.TypeOf(target).Elem()).Interface()
}

func joinPath(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "<document>"
	}
	return path
}
