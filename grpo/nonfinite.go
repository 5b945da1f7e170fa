package grpo

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
)

// nonFinite names the first NaN or ±Inf float of a metrics line by its
// metrics.jsonl key ("terms/kl"), or "" if there is none. encoding/json
// refuses such a value with "json: unsupported value: +Inf", which names no
// key; a diverged update (a learning rate too large for the data) should say
// which number blew up.
func nonFinite(v any) (key string, value float64) {
	var walk func(v reflect.Value, path string) bool
	walk = func(v reflect.Value, path string) bool {
		switch v.Kind() {
		case reflect.Float32, reflect.Float64:
			if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
				key, value = path, f
				return true
			}
		case reflect.Pointer, reflect.Interface:
			return !v.IsNil() && walk(v.Elem(), path)
		case reflect.Struct:
			t := v.Type()
			for i := range t.NumField() {
				f := t.Field(i)
				if !f.IsExported() {
					continue
				}
				name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" {
					continue
				}
				p := path
				if name == "" && f.Anonymous {
					// embedded: its fields are the parent's
				} else {
					if name == "" {
						name = f.Name
					}
					p = join(path, name)
				}
				if walk(v.Field(i), p) {
					return true
				}
			}
		case reflect.Map:
			keys := v.MapKeys()
			sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
			for _, k := range keys {
				if walk(v.MapIndex(k), join(path, fmt.Sprint(k))) {
					return true
				}
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				if walk(v.Index(i), join(path, fmt.Sprint(i))) {
					return true
				}
			}
		}
		return false
	}
	walk(reflect.ValueOf(v), "")
	return key, value
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "/" + name
}
