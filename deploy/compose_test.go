package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/google/uuid"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"golang.org/x/mod/modfile"

	billingconfig "github.com/acme/outboxpair/cmd/billing/config"
	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/auth"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
)

// root is the module root, where docker-compose.yml, the Dockerfile and go.mod live.
const root = ".."

// binary describes what the code says about one binary: the variables it reads
// and how it loads them.
type binary struct {
	vars []string
	load func(envvar.Lookup) error
}

var binaries = map[string]binary{
	"labeling": {
		vars: envvar.LabelingVars,
		load: func(l envvar.Lookup) error { return loadAll(l, labelingconfig.LoadLabeling) },
	},
	"billing": {
		vars: envvar.BillingVars,
		load: func(l envvar.Lookup) error { return loadAll(l, billingconfig.LoadBilling) },
	},
}

// standIns are the binaries of ours that stand in for an outside service (not
// one of the pair: none of the pair's rules on EVENTS_TOKEN, auth, tracing or
// databases applies to them), by binary name.
var standIns = map[string]binary{
	"provider": {
		vars: standin.Vars,
		load: func(l envvar.Lookup) error { _, err := standin.Load(l); return err },
	},
}

// loadAll loads what serve loads: the service's variables and the AUTH_* ones.
func loadAll[C any](l envvar.Lookup, load func(envvar.Lookup) (C, error)) error {
	if _, err := load(l); err != nil {
		return err
	}
	_, err := envvar.LoadAuth(l)
	return err
}

// infra names the services that run no binary of ours.
var infra = []string{"postgres", issuerService, "nats", traceViewer, "prometheus", "grafana"}

// traceViewer is the development trace viewer (Jaeger all-in-one).
const traceViewer = "jaeger"

// issuerService is the development token issuer.
const issuerService = "oauth"

type bundle struct {
	project    *types.Project
	dockerfile dockerfile
	mod        *modfile.File
	goVersion  string   // go.mod's go line
	databases  []string // created by the postgres init script
}

// image is what the tests know of an image they cannot pull (no Docker engine
// where they run): the executables a health check may run in it, and how its
// releases are tagged.
type image struct {
	checks  []string // what a health check may run, in exec form
	variant string   // the tag suffix checks holds for ("" for every tag)
	version int      // numbers in an exact version (17.9 is 2); 0: no version tags, pin by digest
	prefix  string   // what the project writes before the version in a tag ("v" of v3.5.0)
}

// images are the images the compose files and the Dockerfile pull, by
// repository, each with the reason its checks are there (or are not). An image
// missing here fails the tests until someone says what it holds.
var images = map[string]image{
	// The official image ships the server's client tools beside the server.
	"postgres": {checks: []string{"pg_isready"}, version: 2},
	// The alpine variant is alpine plus nats-server, so busybox's wget; the
	// scratch variant holds nats-server alone.
	"nats": {checks: []string{"wget"}, variant: "-alpine", version: 3},
	// Built on alpine (jaeger's docker/base/Dockerfile), so busybox's wget.
	"jaegertracing/all-in-one": {checks: []string{"wget"}, version: 3},
	// Distroless Java: no shell, no curl, no wget. Its java runs a source file
	// only if the runtime keeps the JDK's compiler module (jdk.compiler), which
	// depends on the base each release is built on (Debian's JRE keeps it, the
	// Temurin JREs distroless moved to do not): nothing a test here can see, so
	// no check may run in it.
	"ghcr.io/navikt/mock-oauth2-server": {version: 3},
	// The build stage only: it never runs a check.
	"golang": {version: 3},
	// Built on busybox (the project's busybox image), so its wget; tagged v3.5.0.
	"prom/prometheus": {checks: []string{"wget"}, version: 3, prefix: "v"},
	// Built on alpine (the -ubuntu tags are the other base), so busybox's wget.
	"grafana/grafana": {checks: []string{"wget"}, version: 3},
	// Our final stage: its checks are the binaries the Dockerfile copies in (see
	// checkable). distroless tags no versions, only moving names like nonroot.
	"gcr.io/distroless/static-debian12": {},
}

// splitImage splits name[:tag][@digest] into the repository, tag and digest.
func splitImage(ref string) (repo, tag, digest string) {
	ref, digest, _ = strings.Cut(ref, "@")
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:], digest
	}
	return ref, "", digest
}

var sha256Digest = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// requireExact fails unless ref names one build of its image: a digest, or a tag
// whose version has every number its project releases with (17.9, 2.12.15), so
// neither a new `up` nor a rebuild picks up whatever a moving tag points at that
// week.
func requireExact(t *testing.T, ref string) {
	t.Helper()
	repo, tag, digest := splitImage(ref)
	im, ok := images[repo]
	require.True(t, ok, "%s: add %s to images, with what it holds and how it is versioned", ref, repo)
	if digest != "" {
		require.Regexp(t, sha256Digest, digest, "%s: a digest is sha256:<64 hex>", ref)
		return
	}
	require.NotZero(t, im.version, "%s: %s tags no versions: pin it by digest (%s:%s@sha256:...)", ref, repo, repo, tag)
	version, _, _ := strings.Cut(strings.TrimPrefix(tag, im.prefix), "-")
	exact := fmt.Sprintf(`^[0-9]+(\.[0-9]+){%d}$`, im.version-1)
	require.Regexp(t, exact, version, "%s: the tag must carry the full version (%d numbers) or the image a digest", ref, im.version)
}

// checkable returns what a health check may run in svc's image: the binaries the
// Dockerfile copies in for the image compose builds, the table's entry for one
// it pulls.
func (b bundle) checkable(t *testing.T, svc types.ServiceConfig) []string {
	t.Helper()
	if svc.Build != nil {
		return b.dockerfile.copied
	}
	repo, tag, _ := splitImage(svc.Image)
	im, ok := images[repo]
	require.True(t, ok, "%s: add %s to images, with what it holds", svc.Name, repo)
	if !strings.HasSuffix(tag, im.variant) {
		return nil
	}
	return im.checks
}

// hasCheck reports whether svc has a health check Compose will run.
func hasCheck(svc types.ServiceConfig) bool {
	hc := svc.HealthCheck
	return hc != nil && !hc.Disable && len(hc.Test) > 0 && hc.Test[0] != "NONE"
}

// composeVariants are the ways to run the pair: docker-compose.yml alone (HTTP,
// the default) and with the override that switches it to NATS JetStream.
var composeVariants = map[string][]string{
	"http": {"docker-compose.yml"},
	"nats": {"docker-compose.yml", "docker-compose.nats.yml"},
}

// setup loads docker-compose.yml as `docker compose` would, with env as the only
// environment (no shell variables, no .env), and parses the files it points at.
func setup(t *testing.T, env ...string) bundle {
	t.Helper()
	return setupFiles(t, composeVariants["http"], env...)
}

// setupFiles is setup for the compose files given, in `-f` order.
func setupFiles(t *testing.T, files []string, env ...string) bundle {
	t.Helper()
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(root, f)
	}
	opts, err := cli.NewProjectOptions(
		paths,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env),
	)
	require.NoError(t, err)
	project, err := opts.LoadProject(context.Background())
	require.NoError(t, err, "docker-compose.yml does not load")

	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	mod, err := modfile.ParseLax("go.mod", gomod, nil)
	require.NoError(t, err)
	require.NotNil(t, mod.Go, "go.mod has no go line")

	return bundle{
		project:    project,
		dockerfile: parseDockerfile(t, filepath.Join(root, "Dockerfile")),
		mod:        mod,
		goVersion:  mod.Go.Version,
		databases:  createdDatabases(t, filepath.Join(root, "deploy", "postgres", "10-create-databases.sql")),
	}
}

// apps returns the services that run one of our binaries, by binary name.
func (b bundle) apps(t *testing.T) map[string]types.ServiceConfig {
	t.Helper()
	apps := map[string]types.ServiceConfig{}
	for name, svc := range b.project.Services {
		if len(svc.Command) > 0 {
			if _, ok := binaries[svc.Command[0]]; ok {
				apps[svc.Command[0]] = svc
				continue
			}
			if _, ok := standIns[svc.Command[0]]; ok {
				continue // checked by standInServices
			}
		}
		require.Contains(t, infra, name, "service %s runs none of our binaries", name)
	}
	require.Len(t, apps, len(binaries), "docker-compose.yml must run each binary once")
	return apps
}

// standInServices returns the services that run a stand-in, by binary name.
func (b bundle) standInServices(t *testing.T) map[string]types.ServiceConfig {
	t.Helper()
	out := map[string]types.ServiceConfig{}
	for _, svc := range b.project.Services {
		if len(svc.Command) > 0 {
			if _, ok := standIns[svc.Command[0]]; ok {
				require.NotContains(t, out, svc.Command[0], "docker-compose.yml runs %s twice", svc.Command[0])
				out[svc.Command[0]] = svc
			}
		}
	}
	require.Len(t, out, len(standIns), "docker-compose.yml must run each stand-in once")
	return out
}

func env(svc types.ServiceConfig) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

func TestCompose(t *testing.T) {
	t.Parallel()
	for variant, files := range composeVariants {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			composeChecks(t, variant, files)
		})
	}

	t.Run("http: the default delivers over HTTP and runs no NATS", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		apps := b.apps(t)
		require.NotContains(t, b.project.Services, "nats")
		require.Equal(t, "http", env(apps["labeling"])["EVENTS_TRANSPORT"])
		require.Empty(t, env(apps["labeling"])["NATS_URL"])
		require.Empty(t, env(apps["billing"])["NATS_URL"], "billing consumes no stream")
	})

	t.Run("nats: the override runs JetStream on a volume with per-service users, and points each service at it as its user", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, composeVariants["nats"])
		apps := b.apps(t)
		ns, ok := b.project.Services["nats"]
		require.True(t, ok, "the override adds the nats service")
		opts := natsServerOptions(t, ns)
		require.True(t, opts.JetStream, "JetStream must be enabled")
		onVolume := slices.ContainsFunc(ns.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Target == opts.StoreDir && v.Type == types.VolumeTypeVolume && b.project.Volumes[v.Source].Name != ""
		})
		require.True(t, onVolume, "the JetStream store %s must be a named volume", opts.StoreDir)
		require.True(t, opts.SyncAlways, "JetStream fsyncs each message before its ack (sync_interval: always): the outbox settles a row on that ack")
		require.Empty(t, opts.NoAuthUser, "no anonymous client")
		require.Empty(t, opts.Authorization, "no shared token")
		users := map[string]*server.User{}
		for _, u := range opts.Users {
			users[u.Username] = u
			require.NotNil(t, u.Permissions, "%s has permissions of its own", u.Username)
		}
		require.ElementsMatch(t, []string{"labeling", "billing"}, keys(users), "one user per service")

		lab, bill := env(apps["labeling"]), env(apps["billing"])
		require.Equal(t, "nats", lab["EVENTS_TRANSPORT"])
		for bin, e := range map[string]map[string]string{"labeling": lab, "billing": bill} {
			u, err := url.Parse(e["NATS_URL"])
			require.NoError(t, err)
			require.Equal(t, "nats", u.Scheme)
			require.Equal(t, ns.Name, u.Hostname(), "NATS_URL names the nats service")
			require.Equal(t, "4222", u.Port(), "the server's default client port")
			require.Equal(t, bin, u.User.Username(), "%s connects as its own user", bin)
			password, _ := u.User.Password()
			require.Equal(t, users[bin].Password, password, "%s's password is the server's", bin)
		}
	})

	t.Run("PROVIDER_SECRET from the shell reaches the stand-in provider and billing, which signs with it", func(t *testing.T) {
		t.Parallel()
		secret := "whsec_c2hlbGwtc2VjcmV0LXNoZWxsLXNlY3JldC1zaGVsbA=="
		b := setup(t, "PROVIDER_SECRET="+secret)
		require.Equal(t, secret, env(b.standInServices(t)["provider"])["PROVIDER_SECRET"])
		require.Equal(t, secret, env(b.apps(t)["billing"])["PROVIDER_SECRET"])
	})

	t.Run("PROVIDER_URL names the stand-in provider, its port and its path", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		provider := b.standInServices(t)["provider"]
		u, err := url.Parse(env(b.apps(t)["billing"])["PROVIDER_URL"])
		require.NoError(t, err)
		require.Equal(t, provider.Name, u.Hostname())
		_, port, err := net.SplitHostPort(env(provider)["PROVIDER_ADDR"])
		require.NoError(t, err)
		require.Equal(t, port, u.Port())
		require.Equal(t, standin.Path, u.Path)
	})

	t.Run("nats: passwords from the shell reach the server and the services", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, composeVariants["nats"], "LABELING_NATS_PASSWORD=l-from-shell", "BILLING_NATS_PASSWORD=b-from-shell")
		apps := b.apps(t)
		require.Equal(t, "l-from-shell", env(b.project.Services["nats"])["LABELING_NATS_PASSWORD"])
		require.Contains(t, env(apps["labeling"])["NATS_URL"], ":l-from-shell@")
		require.Contains(t, env(apps["billing"])["NATS_URL"], ":b-from-shell@")
	})
}

// natsServerOptions parses the server configuration the nats service runs (the
// file mounted where its -c points), with the variables its environment gives.
func natsServerOptions(t *testing.T, ns types.ServiceConfig) *server.Options {
	t.Helper()
	cmd := []string(ns.Command)
	c := slices.Index(cmd, "-c")
	require.GreaterOrEqual(t, c, 0, "%s runs a configuration file (-c)", ns.Name)
	target := cmd[c+1]
	var source string
	for _, v := range ns.Volumes {
		if v.Target == target && v.Type == types.VolumeTypeBind {
			require.True(t, v.ReadOnly, "%s mounts its configuration read-only", ns.Name)
			source = v.Source
		}
	}
	require.NotEmpty(t, source, "%s's configuration %s is a file of this repository", ns.Name, target)
	conf, err := os.ReadFile(source)
	require.NoError(t, err)
	var vars strings.Builder
	for k, v := range env(ns) {
		fmt.Fprintf(&vars, "%s: %s\n", k, strconv.Quote(v))
	}
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	require.NoError(t, os.WriteFile(path, append([]byte(vars.String()), conf...), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err, "%s's configuration parses with the variables its environment sets", ns.Name)
	return opts
}

// composeChecks are the checks every compose variant must pass.
func composeChecks(t *testing.T, variant string, files []string) {

	t.Run("each stand-in is set exactly the variables it reads, loads them, publishes its port and runs the binary the Dockerfile builds", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for bin, svc := range b.standInServices(t) {
			vars := standIns[bin].vars
			for name := range svc.Environment {
				require.Contains(t, vars, name, "%s sets %s, which %s does not read (renamed?)", svc.Name, name, bin)
			}
			for _, name := range vars {
				require.Contains(t, svc.Environment, name, "%s reads %s; set it explicitly in docker-compose.yml", bin, name)
			}
			e := env(svc)
			require.NoError(t, standIns[bin].load(func(name string) (string, bool) { v, ok := e[name]; return v, ok }),
				"%s's environment in docker-compose.yml", svc.Name)
			_, port, err := net.SplitHostPort(e[strings.ToUpper(bin)+"_ADDR"])
			require.NoError(t, err, "%s: %s_ADDR", svc.Name, strings.ToUpper(bin))
			published := slices.ContainsFunc(svc.Ports, func(p types.ServicePortConfig) bool {
				return p.Published == port && strconv.Itoa(int(p.Target)) == port
			})
			require.True(t, published, "%s listens on %s but does not publish it as %s:%s", svc.Name, port, port, port)
			require.Equal(t, types.ShellCommand{bin, "serve"}, svc.Command, svc.Name)
			require.Equal(t, types.HealthCheckTest{"CMD", "/usr/local/bin/" + bin, "healthcheck"}, svc.HealthCheck.Test, svc.Name)
			require.Contains(t, b.dockerfile.copied, "/usr/local/bin/"+bin, "the Dockerfile does not copy %s", bin)
			require.Contains(t, b.dockerfile.built, "./cmd/"+bin, "the Dockerfile does not build ./cmd/%s", bin)
			for _, app := range b.apps(t) {
				require.NotEqual(t, port, listenPort(t, app), "%s and %s listen on one port", svc.Name, app.Name)
			}
		}
	})

	t.Run("every variable set is one the service reads, and every one it reads is set", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for bin, svc := range b.apps(t) {
			vars := binaries[bin].vars
			set := map[string]bool{} // NATS_CONSUMER_BILLING_TYPES sets NATS_CONSUMER_<NAME>_TYPES
			for name := range svc.Environment {
				require.Contains(t, vars, envvar.Declared(name), "%s sets %s, which %s does not read (renamed?)", svc.Name, name, bin)
				set[envvar.Declared(name)] = true
			}
			for _, name := range vars {
				if envvar.IsTemplate(name) && !set[name] {
					continue // SUBSCRIBER_<NAME>_*: set per name of SUBSCRIBERS, which the file leaves empty
				}
				require.True(t, set[name], "%s reads %s; set it explicitly in docker-compose.yml", bin, name)
			}
		}
	})

	t.Run("the required variables are set and not empty", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for _, svc := range b.apps(t) {
			e := env(svc)
			for _, name := range envvar.Required {
				require.NotEmpty(t, e[name], "%s: required %s is missing", svc.Name, name)
			}
		}
	})

	t.Run("each service's environment loads without error", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for bin, svc := range b.apps(t) {
			e := env(svc)
			err := binaries[bin].load(func(name string) (string, bool) { v, ok := e[name]; return v, ok })
			require.NoError(t, err, "%s's environment in docker-compose.yml", svc.Name)
		}
	})

	t.Run("EVENTS_TOKEN is the same on both sides", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		apps := b.apps(t)
		require.Equal(t, env(apps["labeling"])["EVENTS_TOKEN"], env(apps["billing"])["EVENTS_TOKEN"])
	})

	t.Run("EVENTS_TOKEN from the shell reaches both sides", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files, "EVENTS_TOKEN=from-the-shell")
		for _, svc := range b.apps(t) {
			require.Equal(t, "from-the-shell", env(svc)["EVENTS_TOKEN"], svc.Name)
		}
	})

	t.Run("BILLING_URL names the billing service and its port", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		apps := b.apps(t)
		u, err := url.Parse(env(apps["labeling"])["BILLING_URL"])
		require.NoError(t, err)
		require.Equal(t, apps["billing"].Name, u.Hostname())
		require.Equal(t, listenPort(t, apps["billing"]), u.Port())
	})

	t.Run("each service publishes the port it listens on", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for _, svc := range b.apps(t) {
			port := listenPort(t, svc)
			published := slices.ContainsFunc(svc.Ports, func(p types.ServicePortConfig) bool {
				return p.Published == port && strconv.Itoa(int(p.Target)) == port
			})
			require.True(t, published, "%s listens on %s but does not publish it as %s:%s", svc.Name, port, port, port)
		}
	})

	t.Run("each DATABASE_URL is its own database created by the init script", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		seen := map[string]string{}
		for _, svc := range b.apps(t) {
			u, err := url.Parse(env(svc)["DATABASE_URL"])
			require.NoError(t, err)
			require.Equal(t, "postgres", u.Hostname(), "%s: DATABASE_URL must name the postgres service", svc.Name)
			db := strings.TrimPrefix(u.Path, "/")
			require.Contains(t, b.databases, db, "%s: database %q is not created by the init script", svc.Name, db)
			require.NotContains(t, seen, db, "%s and %s share database %q", svc.Name, seen[db], db)
			seen[db] = svc.Name
		}
	})

	t.Run("a service has a health check exactly when its image can run one, and the check runs what the image holds", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for name, svc := range b.project.Services {
			runs := b.checkable(t, svc)
			if len(runs) == 0 {
				require.True(t, !hasCheck(svc), "%s: its image %s can run no health check (see images), so it must have none", name, svc.Image)
				continue
			}
			require.True(t, hasCheck(svc), "%s has no healthcheck, though its image %s can run one", name, svc.Image)
			test := svc.HealthCheck.Test
			// CMD-SHELL would need a /bin/sh, which the distroless images lack: the
			// exec form names the executable, so the table can vouch for it.
			require.GreaterOrEqual(t, len(test), 2, "%s: empty healthcheck", name)
			require.Equal(t, "CMD", test[0], "%s: the healthcheck must be in exec form", name)
			require.Contains(t, runs, test[1], "%s: its image %s does not hold %s", name, svc.Image, test[1])
		}
	})

	t.Run("a dependency waits for health where the service depended on has a check, else for its start", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for name, svc := range b.project.Services {
			for dep, d := range svc.DependsOn {
				want := types.ServiceConditionStarted
				if hasCheck(b.project.Services[dep]) {
					want = types.ServiceConditionHealthy
				}
				require.Equal(t, want, d.Condition,
					"%s depends on %s: waiting for a health no check reports never ends; waiting for less than a check reports is a race", name, dep)
			}
		}
		apps := b.apps(t)
		deps := []string{"postgres", issuerService, traceViewer}
		if variant == "nats" {
			deps = append(deps, "nats")
		}
		require.ElementsMatch(t, append(deps, "provider"), keys(apps["billing"].DependsOn))
		require.ElementsMatch(t, append(deps, apps["billing"].Name), keys(apps["labeling"].DependsOn))
	})

	t.Run("tracing is on: both services export OTLP/HTTP to the trace viewer, each under its own name", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		viewer, ok := b.project.Services[traceViewer]
		require.True(t, ok, "no %s service", traceViewer)
		require.True(t, strings.HasPrefix(viewer.Image, "jaegertracing/all-in-one:"), "%s: image %s", traceViewer, viewer.Image)
		require.Equal(t, "true", env(viewer)["COLLECTOR_OTLP_ENABLED"], "%s must receive OTLP", traceViewer)
		ui := slices.ContainsFunc(viewer.Ports, func(p types.ServicePortConfig) bool {
			return p.Published == "16686" && p.Target == 16686
		})
		require.True(t, ui, "%s must publish its UI as 16686:16686 (the README links it)", traceViewer)
		for bin, svc := range b.apps(t) {
			e := env(svc)
			u, err := url.Parse(e["OTEL_EXPORTER_OTLP_ENDPOINT"])
			require.NoError(t, err, svc.Name)
			require.Equal(t, "http", u.Scheme, "%s: the SDK exports OTLP over HTTP", svc.Name)
			require.Equal(t, traceViewer, u.Hostname(), "%s: OTEL_EXPORTER_OTLP_ENDPOINT must name %s", svc.Name, traceViewer)
			require.Equal(t, "4318", u.Port(), "%s: 4318 is OTLP/HTTP", svc.Name)
			require.Equal(t, bin, e["OTEL_SERVICE_NAME"], svc.Name)
		}
	})

	t.Run("auth is on, the same on both sides, and agrees with the issuer service", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		apps := b.apps(t)
		iss, ok := b.project.Services[issuerService]
		require.True(t, ok, "no %s service", issuerService)
		issEnv := env(iss)
		port := issEnv["SERVER_PORT"]
		require.NotEmpty(t, port, "%s: SERVER_PORT", issuerService)
		published := slices.ContainsFunc(iss.Ports, func(p types.ServicePortConfig) bool {
			return p.Published == port && strconv.Itoa(int(p.Target)) == port
		})
		require.True(t, published, "%s must publish %s as %s:%s: a token's iss carries the port the client used", issuerService, port, port, port)

		var cfg struct {
			TokenCallbacks []struct {
				IssuerID        string `json:"issuerId"`
				RequestMappings []struct {
					Claims struct {
						Aud    []string `json:"aud"`
						OrgIDs []string `json:"org_ids"`
					} `json:"claims"`
				} `json:"requestMappings"`
			} `json:"tokenCallbacks"`
		}
		require.NoError(t, json.Unmarshal([]byte(issEnv["JSON_CONFIG"]), &cfg), "%s: JSON_CONFIG", issuerService)
		require.Len(t, cfg.TokenCallbacks, 1)
		cb := cfg.TokenCallbacks[0]

		lab, bill := env(apps["labeling"]), env(apps["billing"])
		for _, name := range envvar.AuthVars {
			require.Equal(t, lab[name], bill[name], "%s differs between the services", name)
		}
		for _, svc := range apps {
			e := env(svc)
			require.Contains(t, []string{"", "false"}, e["AUTH_DISABLED"], "%s: auth must be on in docker-compose.yml", svc.Name)
			u, err := url.Parse(e["AUTH_JWKS_URL"])
			require.NoError(t, err)
			require.Equal(t, issuerService, u.Hostname(), "%s: AUTH_JWKS_URL must name the issuer service (fetched inside compose)", svc.Name)
			require.Equal(t, port, u.Port(), "%s: AUTH_JWKS_URL port", svc.Name)
			require.Equal(t, "/"+cb.IssuerID+"/jwks", u.Path, "%s: AUTH_JWKS_URL path", svc.Name)
			require.Equal(t, "http://localhost:"+port+"/"+cb.IssuerID, e["AUTH_ISSUER"],
				"%s: AUTH_ISSUER must be the iss of a token fetched from the host, as the README does", svc.Name)
			require.Contains(t, svc.DependsOn, issuerService, svc.Name)
		}
		require.NotEmpty(t, cb.RequestMappings)
		for _, m := range cb.RequestMappings {
			require.Contains(t, m.Claims.Aud, lab["AUTH_AUDIENCE"], "every token the issuer hands out must carry AUTH_AUDIENCE")
			require.NotEmpty(t, m.Claims.OrgIDs)
			for _, id := range m.Claims.OrgIDs {
				require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`, id)
			}
		}

		readme, err := os.ReadFile(filepath.Join(root, "README.md"))
		require.NoError(t, err)
		require.True(t, strings.Contains(string(readme), lab["AUTH_ISSUER"]+"/token"),
			"the README's walk-through must get its token from %s/token", lab["AUTH_ISSUER"])
	})

	t.Run("every published port is bound to 127.0.0.1", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for name, svc := range b.project.Services {
			for _, p := range svc.Ports {
				// The issuer hands a token to anyone who reaches it, and the rest is
				// a development stack: none of it is for the machine's network.
				require.Equal(t, "127.0.0.1", p.HostIP, "%s publishes %d on %q: write it as \"127.0.0.1:%s:%d\"",
					name, p.Target, p.HostIP, p.Published, p.Target)
			}
		}
	})

	t.Run("every file a service mounts from the repository exists, read-only", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for name, svc := range b.project.Services {
			for _, v := range svc.Volumes {
				if v.Type == types.VolumeTypeBind {
					require.FileExists(t, v.Source, "%s mounts %s at %s", name, v.Source, v.Target)
					require.True(t, v.ReadOnly, "%s mounts %s read-only (:ro)", name, v.Source)
				}
			}
		}
	})

	t.Run("postgres keeps its data in a named volume and creates the databases on first start", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		pg, ok := b.project.Services["postgres"]
		require.True(t, ok)
		var data, initScript bool
		for _, v := range pg.Volumes {
			switch {
			case v.Target == "/var/lib/postgresql/data":
				require.Equal(t, types.VolumeTypeVolume, v.Type, "the data directory must be a named volume")
				require.Contains(t, b.project.Volumes, v.Source)
				data = true
			case strings.HasPrefix(v.Target, "/docker-entrypoint-initdb.d/"):
				require.Equal(t, types.VolumeTypeBind, v.Type)
				require.FileExists(t, v.Source)
				initScript = true
			}
		}
		require.True(t, data, "postgres has no named data volume")
		require.True(t, initScript, "postgres does not mount the init script")
		require.ElementsMatch(t, []string{"labeling", "billing"}, b.databases)
	})

	t.Run("the app health checks and commands run binaries the Dockerfile builds", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, files)
		for bin, svc := range b.apps(t) {
			require.Equal(t, types.ShellCommand{bin, "serve"}, svc.Command, svc.Name)
			require.Equal(t, types.HealthCheckTest{"CMD", "/usr/local/bin/" + bin, "healthcheck"}, svc.HealthCheck.Test,
				"%s: the image has no shell, so the check must be the exec form of the binary's healthcheck subcommand", svc.Name)
			require.Contains(t, b.dockerfile.copied, "/usr/local/bin/"+bin, "the Dockerfile does not copy %s", bin)
			require.Contains(t, b.dockerfile.built, "./cmd/"+bin, "the Dockerfile does not build ./cmd/%s", bin)
		}
	})
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d := b.dockerfile

	t.Run("the build stage's Go matches go.mod", func(t *testing.T) {
		t.Parallel()
		require.True(t, strings.HasPrefix(d.builder, "golang:"), "the build stage must use the official golang image, got %q", d.builder)
		tag := strings.TrimPrefix(d.builder, "golang:")
		require.Equal(t, minor(b.goVersion), minor(tag), "Dockerfile %s vs go.mod go %s", d.builder, b.goVersion)
	})

	t.Run("the build is static", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "0", d.env["CGO_ENABLED"])
	})

	t.Run("the final stage is distroless and runs as non-root", func(t *testing.T) {
		t.Parallel()
		repo, tag, _ := splitImage(d.final)
		require.Equal(t, "gcr.io/distroless/static-debian12", repo)
		require.Equal(t, "nonroot", tag, "the tag says which build the digest is")
		require.True(t, strings.HasPrefix(d.user, "nonroot"), "USER is %q", d.user)
	})
}

func TestImages(t *testing.T) {
	t.Parallel()

	t.Run("every image compose pulls and every FROM names an exact version or a digest", func(t *testing.T) {
		t.Parallel()
		var refs []string
		for _, files := range composeVariants {
			for _, svc := range setupFiles(t, files).project.Services {
				// The image compose builds is named by the build, not pulled.
				if svc.Build == nil {
					refs = append(refs, svc.Image)
				}
			}
		}
		refs = append(refs, setup(t).dockerfile.from...)
		require.NotEmpty(t, refs)
		for _, ref := range refs {
			requireExact(t, ref)
		}
	})

	nats := func(t *testing.T) string {
		t.Helper()
		ns, ok := setupFiles(t, composeVariants["nats"]).project.Services["nats"]
		require.True(t, ok)
		return ns.Image
	}

	t.Run("the NATS image runs the server the tests run its configuration on", func(t *testing.T) {
		t.Parallel()
		b := setupFiles(t, composeVariants["nats"])
		var module string
		for _, r := range b.mod.Require {
			if r.Mod.Path == "github.com/nats-io/nats-server/v2" {
				module = strings.TrimPrefix(r.Mod.Version, "v")
			}
		}
		require.NotEmpty(t, module, "go.mod requires nats-server")
		_, tag, _ := splitImage(nats(t))
		version, _, _ := strings.Cut(tag, "-")
		require.Equal(t, module, version,
			"the compose NATS image is %s, go.mod's nats-server (which parses and runs deploy/nats/nats-server.conf in the tests) v%s", tag, module)
	})

	t.Run("every file that names the NATS image names the compose file's tag", func(t *testing.T) {
		t.Parallel()
		want := nats(t)
		found := map[string][]string{} // file → the tags it names, where not want
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				if err == nil && d.Name() == ".git" {
					return filepath.SkipDir
				}
				return err
			}
			text, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			for _, m := range natsImage.FindAllStringSubmatch(string(text), -1) {
				if m[1] != want {
					found[filepath.ToSlash(rel)] = append(found[filepath.ToSlash(rel)], m[1])
				}
			}
			return nil
		})
		require.NoError(t, err)
		require.Empty(t, found, "these name another NATS image than the compose file's %s", want)
	})
}

// natsImage finds a reference to the NATS image with a version tag, as a
// document or a file names it. The version has a dot, and neither a URL
// (nats://) nor a host and port (@nats:4222) is one.
var natsImage = regexp.MustCompile(`(?:^|[^@\w.-])(nats:[0-9]+\.[\w.-]*\w)`)

// TestServicesStartBeforeTheIssuer holds the code to what docker-compose.yml
// assumes when the services wait only for the issuer to start (it has no health
// check): with the issuer not answering, the auth module starts, a token is
// refused as "retry later" (503, not 401), and once the issuer answers, the
// first token fetches its keys.
func TestServicesStartBeforeTheIssuer(t *testing.T) {
	t.Parallel()
	iss := authtest.New(t)
	iss.SetDown(true)
	cfg := iss.Config()
	// The default spaces the fetches a failed start leaves to the tokens 10s apart
	// (the 503's Retry-After); the test needs no wait.
	cfg.MinRefresh = time.Nanosecond

	var v *auth.Verifier
	app := fx.New(
		auth.Module,
		fx.Supply(auth.Settings{Config: cfg}, slog.New(slog.DiscardHandler)),
		fx.Populate(&v),
		fx.NopLogger,
	)
	require.NoError(t, app.Err())
	require.NoError(t, app.Start(t.Context()), "the services' auth starts while the issuer is down")
	t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })

	org := uuid.NewString()
	_, err := v.Verify(t.Context(), iss.For(t, org))
	require.ErrorIs(t, err, auth.ErrUnavailable, "before the issuer is up a token is a retry-later, not a refusal")

	iss.SetDown(false)
	claims, err := v.Verify(t.Context(), iss.For(t, org))
	require.NoError(t, err, "once the issuer is up the first token fetches its keys")
	require.True(t, claims.Has(uuid.MustParse(org)))
}

// dockerfile is what the test needs from the Dockerfile.
type dockerfile struct {
	builder string            // image of the first stage
	final   string            // image of the last stage
	from    []string          // every image a FROM pulls (not an earlier stage)
	env     map[string]string // ENV of the build stage
	user    string            // last USER
	copied  []string          // paths copied into the final stage from another stage
	built   []string          // packages named by `go build`
}

var envPair = regexp.MustCompile(`(\w+)=(\S+)`)

// parseDockerfile reads the few instructions the checks need, joining continued lines.
func parseDockerfile(t *testing.T, path string) dockerfile {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()

	d := dockerfile{env: map[string]string{}}
	var lines []string
	var cont strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if s, ok := strings.CutSuffix(line, `\`); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(line)
		lines = append(lines, cont.String())
		cont.Reset()
	}
	require.NoError(t, sc.Err())

	stages := 0
	var names []string // of the stages so far
	for _, line := range lines {
		fields := strings.Fields(line)
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			stages++
			// FROM [--platform=...] image [AS name]
			img := fields[slices.IndexFunc(fields[1:], func(f string) bool { return !strings.HasPrefix(f, "--") })+1]
			if stages == 1 {
				d.builder = img
			}
			d.final = img
			if !slices.Contains(names, strings.ToLower(img)) {
				d.from = append(d.from, img)
			}
			if n := len(fields); n >= 4 && strings.EqualFold(fields[n-2], "AS") {
				names = append(names, strings.ToLower(fields[n-1]))
			}
		case "ENV":
			if stages == 1 {
				for _, m := range envPair.FindAllStringSubmatch(line, -1) {
					d.env[m[1]] = m[2]
				}
			}
		case "USER":
			d.user = fields[1]
		case "COPY":
			if len(fields) > 3 && strings.HasPrefix(fields[1], "--from=") {
				dest := fields[len(fields)-1]
				for _, src := range fields[2 : len(fields)-1] {
					if strings.HasSuffix(dest, "/") {
						d.copied = append(d.copied, dest+filepath.Base(src))
					} else {
						d.copied = append(d.copied, dest)
					}
				}
			}
		case "RUN":
			if i := slices.Index(fields, "build"); i > 0 && fields[i-1] == "go" {
				for _, f := range fields[i+1:] {
					if strings.HasPrefix(f, "./") {
						d.built = append(d.built, strings.TrimSuffix(f, "/"))
					}
				}
			}
		}
	}
	return d
}

var createDatabase = regexp.MustCompile(`(?i)CREATE\s+DATABASE\s+"?(\w+)"?`)

func createdDatabases(t *testing.T, path string) []string {
	t.Helper()
	sql, err := os.ReadFile(path)
	require.NoError(t, err)
	var names []string
	for _, m := range createDatabase.FindAllStringSubmatch(string(sql), -1) {
		names = append(names, m[1])
	}
	return names
}

func listenPort(t *testing.T, svc types.ServiceConfig) string {
	t.Helper()
	_, port, err := net.SplitHostPort(env(svc)["HTTP_ADDR"])
	require.NoError(t, err, "%s: HTTP_ADDR", svc.Name)
	return port
}

// minor returns "1.26" of "1.26", "1.26.0" or "1.26.3-bookworm".
func minor(v string) string {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestDockerBuildContext copies the module as `docker build` would see it (after
// .dockerignore) and builds every package there, so an ignore rule that drops a
// file the binaries need fails here rather than in the image build.
func TestDockerBuildContext(t *testing.T) {
	t.Parallel()

	ignore, err := os.Open(filepath.Join(root, ".dockerignore"))
	require.NoError(t, err)
	patterns, err := ignorefile.ReadAll(ignore)
	require.NoError(t, ignore.Close())
	require.NoError(t, err)
	pm, err := patternmatcher.New(patterns)
	require.NoError(t, err)

	ctxDir := t.TempDir()
	var copied []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		excluded, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		switch {
		case excluded && d.IsDir() && !pm.Exclusions():
			return filepath.SkipDir
		case excluded, d.IsDir():
			return nil
		}
		copied = append(copied, filepath.ToSlash(rel))
		return copyFile(path, filepath.Join(ctxDir, rel))
	})
	require.NoError(t, err)
	require.Contains(t, copied, "go.mod")
	require.Contains(t, copied, "go.sum")
	require.NotContains(t, copied, "docker-compose.yml", ".dockerignore no longer applies")

	// The Dockerfile builds ./cmd/labeling and ./cmd/billing; ./... holds them and
	// every package they can import.
	cmd := exec.Command("go", "build", "-trimpath", "./...")
	cmd.Dir = ctxDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build in the Docker build context:\n%s", out)
}

func copyFile(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, data, 0o644)
}
