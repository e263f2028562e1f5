package inputs

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// unknownField reports the first key of n, a document of the Go shape t,
// that t does not have, as "line 7: unknown field spec.filepth (did you
// mean spec.filepath?)", or the first value of a type the field cannot
// take (see wrongType), or nil. A typo in a field render reads would
// otherwise be dropped without a word and change what render does (a
// mistyped strictMatchLabels is false). Field names are the yaml tags, then
// the json tags (for apimachinery's types), then the lower-cased Go name,
// as yaml.v3 decodes them; values of a type that decodes itself
// (metav1.Time, yaml.Node) are not looked into.
func unknownField(n *yaml.Node, t reflect.Type, at string) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if opaque(t) {
		return nil
	}
	if err := wrongType(n, t, at); err != nil {
		return err
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := map[string]reflect.Type{}
		structFields(t, fields)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "<<" && k.Tag == "!!merge" {
				if err := mergeFields(v, t, at); err != nil {
					return err
				}
				continue
			}
			ft, ok := fields[k.Value]
			if !ok {
				msg := fmt.Sprintf("line %d: unknown field %s", k.Line, join(at, k.Value))
				if s := suggest(k.Value, fields); s != "" {
					msg += fmt.Sprintf(" (did you mean %s?)", join(at, s))
				}
				return fmt.Errorf("%s", msg)
			}
			if err := unknownField(v, ft, join(at, k.Value)); err != nil {
				return err
			}
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			if err := unknownField(item, t.Elem(), fmt.Sprintf("%s[%d]", at, i)); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := unknownField(n.Content[i+1], t.Elem(), join(at, n.Content[i].Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

// wrongType says, naming the field, when n is not a value of t as render
// means it: true or false for a bool (yaml.v3 would take the string "yes"
// as true), a whole number for an integer (it would take 0.5 as 0), a
// duration string for a time.Duration, a scalar for a string, a mapping
// for a struct or map, a list for a slice. yaml.v3's own errors name a
// line only. A null is every type's zero value. Values are described,
// never quoted (they may be a Secret's).
func wrongType(n *yaml.Node, t reflect.Type, at string) error {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return nil
	}
	scalar := n.Kind == yaml.ScalarNode
	var want string
	switch {
	case t == durationType:
		if _, err := time.ParseDuration(n.Value); scalar && n.ShortTag() == "!!str" && err == nil {
			return nil
		}
		want = "a duration such as 90s, 10m or 1h30m"
	case t.Kind() == reflect.Bool:
		if scalar && n.ShortTag() == "!!bool" {
			return nil
		}
		want = "true or false"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		if scalar && n.ShortTag() == "!!int" {
			if err := n.Decode(reflect.New(t).Interface()); err == nil {
				return nil
			}
			return fmt.Errorf("line %d: %s is a number out of range", n.Line, at)
		}
		want = "a whole number"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		if scalar && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
			return nil
		}
		want = "a number"
	case t.Kind() == reflect.String:
		if scalar {
			return nil
		}
		want = "a string"
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if n.Kind == yaml.MappingNode {
			return nil
		}
		want = "a mapping"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if n.Kind == yaml.SequenceNode {
			return nil
		}
		want = "a list"
	default:
		return nil
	}
	return fmt.Errorf("line %d: %s is %s: want %s", n.Line, at, describe(n), want)
}

// describe names what a node holds, without its value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!bool":
		return "a boolean"
	case "!!int":
		return "a whole number"
	case "!!float":
		return "a number with a fraction"
	case "!!str":
		switch strings.ToLower(n.Value) {
		case "y", "yes", "n", "no", "on", "off":
			if n.Style == 0 {
				return "the string " + n.Value + " (YAML 1.2 has no yes or no: its booleans are true and false)"
			}
		}
		return "a string"
	}
	return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
}

// mergeFields checks what a merge key (<<: *defaults) brings in.
func mergeFields(v *yaml.Node, t reflect.Type, at string) error {
	for v.Kind == yaml.AliasNode && v.Alias != nil {
		v = v.Alias
	}
	if v.Kind == yaml.SequenceNode {
		for _, m := range v.Content {
			if err := unknownField(m, t, at); err != nil {
				return err
			}
		}
		return nil
	}
	return unknownField(v, t, at)
}

func join(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

var (
	yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	nodeType        = reflect.TypeFor[yaml.Node]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// opaque types decode themselves, or take anything.
func opaque(t reflect.Type) bool {
	if t == nodeType || t.Kind() == reflect.Interface {
		return true
	}
	p := reflect.PointerTo(t)
	return p.Implements(yamlUnmarshaler) || p.Implements(jsonUnmarshaler) || p.Implements(textUnmarshaler)
}

// structFields collects t's field names and types, inlined structs
// flattened.
func structFields(t reflect.Type, into map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline, skip := fieldName(f)
		if skip {
			continue
		}
		if inline {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structFields(ft, into)
			}
			continue
		}
		if f.IsExported() {
			into[name] = f.Type
		}
	}
}

func fieldName(f reflect.StructField) (name string, inline, skip bool) {
	for _, key := range []string{"yaml", "json"} {
		tag, ok := f.Tag.Lookup(key)
		if !ok {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			return "", false, true
		}
		if strings.Contains(","+opts+",", ",inline,") {
			return "", true, false
		}
		if name != "" {
			return name, false, false
		}
		if f.Anonymous {
			return "", true, false
		}
		return strings.ToLower(f.Name), false, false
	}
	if f.Anonymous {
		return "", true, false
	}
	return strings.ToLower(f.Name), false, false
}

// suggest is the known field closest to name, when it is close enough to
// be a typo: a few letters added, dropped, swapped or in another case.
func suggest(name string, fields map[string]reflect.Type) string {
	best, bestD := "", -1
	for f := range fields {
		d := distance(strings.ToLower(name), strings.ToLower(f))
		if bestD < 0 || d < bestD || (d == bestD && f < best) {
			best, bestD = f, d
		}
	}
	if bestD < 0 || bestD > max(2, len(name)/4) {
		return ""
	}
	return best
}

// distance is the Levenshtein edit distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
