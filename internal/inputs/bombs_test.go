package inputs

// The alias bombs, for the tests and the fuzz corpus.

// AliasBomb is 14 lines whose aliases expand to about a billion nodes:
// kustomize expanding it ran render out of memory.
const AliasBomb = `apiVersion: v1
kind: ConfigMap
metadata: {name: bomb}
data:
  a: &a ["x","x","x","x","x","x","x","x","x","x"]
  b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
  c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
  d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
  e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
  f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
  g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
  h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
  i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

// ListBomb is the alias bomb as a list.
const ListBomb = `- &a ["x","x","x","x","x","x","x","x","x","x"]
- &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
- &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
- &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
- &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
- &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
- &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
- &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
- &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
