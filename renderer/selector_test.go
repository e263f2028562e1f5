package renderer

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CheckSelector uses Kubernetes' own rules: keys and values, operators and
// the values each operator takes, and kubectl's notation.
func TestCheckSelector(t *testing.T) {
	req := func(key, op string, values ...string) []metav1.LabelSelectorRequirement {
		return []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOperator(op), Values: values}}
	}
	tests := []struct {
		name    string
		sel     Selector
		want    string // selector string, or the error's text
		wantErr bool
	}{
		{name: "labels", sel: Selector{MatchLabels: map[string]string{"b": "2", "a": "1"}}, want: "a=1,b=2"},
		{name: "in", sel: Selector{MatchExpressions: req("env", "In", "dev", "prod")}, want: "env in (dev,prod)"},
		{name: "exists", sel: Selector{MatchExpressions: req("gpu", "Exists")}, want: "gpu"},
		{name: "bad key", sel: Selector{MatchLabels: map[string]string{"bad key!": "x"}}, want: "invalid selector", wantErr: true},
		{name: "bad value", sel: Selector{MatchLabels: map[string]string{"k": "-x"}}, want: "invalid selector", wantErr: true},
		{name: "unknown operator", sel: Selector{MatchExpressions: req("env", "Equals", "dev")}, want: `key env: operator "Equals" is not In, NotIn, Exists or DoesNotExist`, wantErr: true},
		{name: "in without values", sel: Selector{MatchExpressions: req("env", "In")}, want: "invalid selector", wantErr: true},
		{name: "exists with values", sel: Selector{MatchExpressions: req("env", "Exists", "x")}, want: "invalid selector", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckSelector(tt.sel)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want one containing %q", err, tt.want)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}
