package image

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// kollaUsers are kolla's fixed service users (kolla/common/users.py): the
// same UID and GID each, every one also in the group kolla (42400), so
// that a pod's fsGroup and runAsUser mean in these images what they mean
// in kolla's.
var kollaUsers = []struct {
	name string
	id   int
	home string
}{
	{"glance", 42415, "/var/lib/glance"},
	{"keystone", 42425, "/var/lib/keystone"},
	{"mysql", 42434, "/var/lib/mysql"},
	{"nova", 42436, "/var/lib/nova"},
	{"rabbitmq", 42439, "/var/lib/rabbitmq"},
	{"memcached", 42457, "/run/memcache"},
}

// kollaPath is kolla's PATH: its virtualenv first.
const kollaPath = "PATH=/var/lib/kolla/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Service is a kolla-style image of one service of the examples slice: a
// Debian root with the real service's packages in kolla's layout (its
// users and IDs, /var/log/kolla, /var/lib/kolla/config_files), the image's
// start hook, and the agent as the entrypoint (images/kolla/Dockerfile).
type Service struct {
	Name      string   // the image is localhost/kolla-<name>:dev
	Packages  []string // Debian's
	User      string   // the image's USER, as kolla's image sets it ("" root)
	Customize []string // shell commands on the root ($1), after the packages
	// Hook is the image's kolla_extend_start, a file of the repository
	// ("" none): what kolla's extend_start.sh for the service does.
	Hook string
	// Sudo gives the image kolla's privilege model for its user: sudo, a
	// sudoers rule that lets the group kolla run kolla_copy_cacerts as
	// root, and that script (images/kolla-debian/base).
	Sudo bool
}

// Ref is the image's reference.
func (s Service) Ref() string { return "localhost/kolla-" + s.Name + ":dev" }

// Services are the examples slice's services.
func Services() []Service {
	return []Service{
		{
			Name:     "mariadb",
			Packages: []string{"mariadb-server"},
			User:     "mysql",
			Customize: []string{
				`rm -rf "$1"/var/lib/mysql/*`,
				`install -d -o 42434 -g 42434 -m 755 "$1/run/mysqld"`,
			},
		},
		{
			Name:     "memcached",
			Packages: []string{"memcached"},
			User:     "memcached",
		},
		{
			Name:     "keystone",
			Packages: []string{"apache2", "libapache2-mod-wsgi-py3", "python3-keystone", "python3-pymysql", "python3-pymemcache"},
			Customize: []string{
				`: > "$1/etc/apache2/ports.conf"`, // kolla's config says what to listen on
				`install -d "$1/var/lib/kolla/venv/bin"`,
				`ln -s /usr/bin/keystone-wsgi-public /usr/bin/keystone-manage "$1/var/lib/kolla/venv/bin/"`,
			},
			Hook: "images/kolla-debian/keystone/extend_start.sh",
		},
		{
			// kolla's glance-api image; the openstack client too, which
			// the examples' service-users Job runs (kolla's toolbox has it).
			Name:     "glance-api",
			Packages: []string{"glance-api", "python3-openstackclient", "python3-pymysql", "python3-memcache"},
			User:     "glance",
			Customize: []string{
				`install -d -o 42415 -g 42415 "$1/var/lib/glance/images" "$1/var/lib/glance/tmp"`,
			},
			Hook: "images/kolla-debian/glance/extend_start.sh",
		},
		{
			Name:     "rabbitmq",
			Packages: []string{"rabbitmq-server"},
			User:     "rabbitmq",
			Customize: []string{
				// kolla's image gives rabbitmq its configuration directory:
				// config.json and the templates write there as rabbitmq.
				`install -d -o 42439 -g 42439 "$1/etc/rabbitmq/conf.d"`,
				`chown 42439:42439 "$1/etc/rabbitmq"`,
				`rm -rf "$1"/var/lib/rabbitmq/*`,
			},
		},
		{
			Name:     "nova-conductor",
			Packages: []string{"nova-conductor", "python3-pymysql"},
			User:     "nova",
			Sudo:     true,
			Customize: []string{
				`chown -R 42436:42436 "$1/etc/nova"`,
				`install -d -o 42436 -g 42436 "$1/var/lib/nova/tmp"`,
				// Debian packages no kolla_start: here it is the agent's
				// kolla mode, as images/kolla makes the entrypoint.
				`printf '#!/bin/sh\nexec kolla-agent run "$@"\n' > "$1/usr/local/bin/kolla_start"`,
				`chmod 755 "$1/usr/local/bin/kolla_start"`,
			},
			Hook: "images/kolla-debian/nova/extend_start.sh",
		},
	}
}

// ServiceRoot is the Debian root of s, built in cacheDir or cached there.
func ServiceRoot(cacheDir string, s Service) (string, error) {
	var passwd, shadow, group, gshadow, homes []string
	var members []string
	for _, u := range kollaUsers {
		members = append(members, u.name)
	}
	group = append(group, "kolla:x:42400:"+strings.Join(members, ","))
	gshadow = append(gshadow, "kolla:!::"+strings.Join(members, ","))
	for _, u := range kollaUsers {
		passwd = append(passwd, fmt.Sprintf("%s:x:%d:%d::%s:/usr/sbin/nologin", u.name, u.id, u.id, u.home))
		shadow = append(shadow, u.name+":!:19000::::::")
		group = append(group, fmt.Sprintf("%s:x:%d:", u.name, u.id))
		gshadow = append(gshadow, u.name+":!::")
		homes = append(homes, fmt.Sprintf(`install -d -o %d -g %d "$1%s"`, u.id, u.id, u.home))
	}
	appendTo := func(file string, lines []string) string {
		return fmt.Sprintf(`printf '%%s\n' %s >> "$1/etc/%s"`, quoteAll(lines), file)
	}
	pkgs := s.Packages
	if s.Sudo {
		pkgs = append(slices.Clone(pkgs), "sudo", "ca-certificates")
	}
	r := Root{
		Suite:    "bookworm",
		Packages: pkgs,
		// Before the packages, whose scripts then find the users.
		Essential: []string{appendTo("passwd", passwd), appendTo("shadow", shadow), appendTo("group", group), appendTo("gshadow", gshadow)},
		Customize: append(append(homes,
			`install -d -m 2775 -g 42400 "$1/var/log/kolla"`,
			`install -d "$1/var/lib/kolla/config_files"`),
			s.Customize...),
	}
	return r.Build(cacheDir)
}

func quoteAll(ss []string) string {
	var out []string
	for _, s := range ss {
		out = append(out, "'"+strings.ReplaceAll(s, "'", `'\''`)+"'")
	}
	return strings.Join(out, " ")
}

// ServiceImage builds s's image from its root (ServiceRoot), the agent's
// image and the repository at repo.
func ServiceImage(repo string, s Service, agent Image, root string) (Image, error) {
	base := Image{Layers: []Layer{{Tar: root}}, Config: Config{Env: []string{kollaPath}, User: s.User}}
	if s.Hook != "" {
		b, err := os.ReadFile(filepath.Join(repo, s.Hook))
		if err != nil {
			return Image{}, fmt.Errorf("image %s: %w", s.Name, err)
		}
		base.Layers = append(base.Layers, Layer{Files: []File{{Path: "/usr/local/bin/kolla_extend_start", Mode: 0o644, Data: b}}})
	}
	if s.Sudo {
		var files []File
		for _, f := range []struct {
			src, dest string
			mode      int64
		}{
			{"images/kolla-debian/base/kolla_copy_cacerts", "/usr/local/bin/kolla_copy_cacerts", 0o755},
			{"images/kolla-debian/base/sudoers", "/etc/sudoers.d/kolla", 0o440},
		} {
			b, err := os.ReadFile(filepath.Join(repo, f.src))
			if err != nil {
				return Image{}, fmt.Errorf("image %s: %w", s.Name, err)
			}
			files = append(files, File{Path: f.dest, Mode: f.mode, Data: b})
		}
		base.Layers = append(base.Layers, Layer{Files: files})
	}
	src := Sources{Root: repo, Images: map[string]Image{"kolla-agent": agent, "debian-root": base}}
	return Build(filepath.Join(repo, "images/kolla/Dockerfile"), s.Ref(), map[string]string{"AGENT": "kolla-agent", "BASE": "debian-root"}, src)
}
