// Package entrypoint reads the environment variables of openstack-helm's
// kubernetes-entrypoint (airshipit/kubernetes-entrypoint) and turns them into
// the agent's dependencies, so that kolla-agent is a drop-in replacement for
// it in an init container or as a container's entrypoint.
//
// # Variables
//
//	NAMESPACE                   own namespace; default "default" when unset or empty
//	POD_NAME                    own pod; needed by DAEMONSET, CONTAINER and same-node POD_JSON
//	DEPENDENCY_SERVICE          NAME or NS:NAME, comma separated
//	DEPENDENCY_JOBS             NAME or NS:NAME, comma separated
//	DEPENDENCY_JOBS_JSON        [{"name":N,"namespace":NS} | {"labels":{..},"namespace":NS}]
//	DEPENDENCY_DAEMONSET        NAME or NS:NAME, comma separated
//	DEPENDENCY_CONTAINER        container names of this pod, comma separated
//	DEPENDENCY_POD_JSON         [{"labels":{..},"namespace":NS,"requireSameNode":BOOL}]
//	DEPENDENCY_CUSTOM_RESOURCE  [{"apiVersion","kind","name","namespace",
//	                              "fields":[{"key":"a.b","value":V}],
//	                              "conditions":[{"type":T,"status":S}]}]
//	DEPENDENCY_SOCKET           paths of Unix sockets, comma separated
//	COMMAND                     the command to exec once every dependency is met
//
// A name without "NS:" and a JSON item without "namespace" take NAMESPACE.
// When DEPENDENCY_JOBS_JSON is not empty it wins: DEPENDENCY_JOBS is then not
// read at all (kubernetes-entrypoint does the same, with a warning).
// In DEPENDENCY_CUSTOM_RESOURCE an apiVersion "v1" names the core group and
// "GROUP/VERSION" any other; a condition's status defaults to "True".
//
// # What Parse guarantees
//
//   - An unset, empty or all-blank variable means no dependency of its kind, as
//     does a JSON variable holding [] or null. Blanks around a list item are
//     ignored.
//   - Every other malformed input is an error that names the variable and the
//     item (1-based) and says what is wrong with it, for example
//     `DEPENDENCY_JOBS item 2 "openstack:": empty job name`. No dependency is
//     ever silently dropped, which kubernetes-entrypoint does for bad JSON,
//     "too:many:colons", a job with both name and labels, and anything needing
//     POD_NAME when POD_NAME is unset. Errors: an empty item, an empty
//     namespace or name, a name or namespace that is not a valid Kubernetes
//     name, more than one colon, a namespace on a container, invalid or empty
//     labels (an empty selector would match every object), JSON that does not
//     parse, an unknown JSON field (named), a field of the wrong type (named),
//     a job item with both name and labels or neither, a condition status
//     other than True, False or Unknown, a dependency that needs POD_NAME
//     without it, a COMMAND with an unclosed quote or a trailing backslash,
//     and DEPENDENCY_CONFIG (config templating is not supported).
//     All errors are reported at once (errors.Join), one per line; past 20
//     the rest are only counted.
//   - COMMAND is split the way a POSIX shell splits words, honouring single
//     and double quotes and backslashes ("bash -c 'echo a b'" is three
//     words), where kubernetes-entrypoint splits on every single space.
//   - Every API dependency has its Namespace set, and the String() of every
//     dependency returned parses back with discovery.Parse, so it can be
//     logged, shown and re-read in the agent's own syntax.
//   - Parse never panics, whatever the input.
//
// Deliberate differences in what is waited for: DEPENDENCY_SOCKET waits until
// the socket accepts a connection (kubernetes-entrypoint only stats the path),
// and a custom resource field is compared as the field's own type, so
// "value":"3" or 3 matches an integer 3 (kubernetes-entrypoint compares the
// raw value with a string and never matches a number or a boolean).
package entrypoint
