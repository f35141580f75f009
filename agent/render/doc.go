// Package render puts the agent's own templates in place with discovered
// values (template.go: agent.yaml's render: items, strict, with DNS and the
// API's answers), and holds what writing a service's config needs, shared
// with agent/kolla: File and Overlay (set.go), atomic writes (write.go:
// WriteFile), octal modes (perm.go) and owners looked up in the image's own
// /etc/passwd and /etc/group (users.go).
package render
