package deploy

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	billingconfig "github.com/acme/outboxpair/cmd/billing/config"
	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/migrations"
)

// contractFile is the repository's own contract; code and docs cite its sections.
const contractFile = "CONTRACT.md"

// contractTable is one markdown table of CONTRACT.md: its header and its rows,
// each cell trimmed.
type contractTable struct {
	header []string
	rows   [][]string
}

// docTables returns the markdown tables of file (relative to the module root) in
// order.
func docTables(t *testing.T, file string) []contractTable {
	t.Helper()
	var tables []contractTable
	var cur *contractTable
	for _, line := range strings.Split(read(t, file), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			cur = nil
			continue
		}
		// An escaped \| is part of a cell, not a separator.
		cells := strings.Split(strings.Trim(strings.ReplaceAll(line, `\|`, "\x00"), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(strings.ReplaceAll(cells[i], "\x00", `\|`))
		}
		switch {
		case cur == nil:
			tables = append(tables, contractTable{header: cells})
			cur = &tables[len(tables)-1]
		case strings.HasPrefix(cells[0], "---"):
		default:
			require.Len(t, cells, len(cur.header), "%s: row %q has the wrong number of cells", file, line)
			cur.rows = append(cur.rows, cells)
		}
	}
	return tables
}

// tablesWith returns the tables of file whose header starts with cols; a column
// given as "a|b" matches either name.
func tablesWith(t *testing.T, file string, cols ...string) []contractTable {
	t.Helper()
	var out []contractTable
	for _, tb := range docTables(t, file) {
		if len(tb.header) < len(cols) {
			continue
		}
		match := true
		for i, col := range cols {
			match = match && slices.Contains(strings.Split(col, "|"), tb.header[i])
		}
		if match {
			out = append(out, tb)
		}
	}
	require.NotEmpty(t, out, "%s has no table with columns %v", file, cols)
	return out
}

// varDocs are the files whose variable tables must match infra/env: the
// contract alone holds the table; docs/configuration.md links to it.
var varDocs = []string{contractFile}

var backticked = regexp.MustCompile("`([^`]*)`")

// documentedVar is one row of a variable table.
type documentedVar struct {
	name     string
	services []string          // labeling, billing
	defaults map[string]string // by service; absent when the doc states none
}

// documentedVars reads every `| variable | who | default | ...` table of file.
func documentedVars(t *testing.T, file string) []documentedVar {
	t.Helper()
	var vars []documentedVar
	for _, tb := range tablesWith(t, file, "variable", "who", "default") {
		for _, row := range tb.rows {
			names := backticked.FindAllStringSubmatch(row[0], -1)
			require.Len(t, names, 1, "%s: one variable a row, got %q", file, row[0])
			v := documentedVar{name: names[0][1], defaults: map[string]string{}}
			who := row[1]
			if who == "both" {
				v.services = []string{"labeling", "billing"}
			}
			for _, svc := range []string{"labeling", "billing"} {
				if strings.HasPrefix(who, svc) || strings.Contains(who, ", "+svc) {
					v.services = append(v.services, svc)
				}
			}
			require.NotEmpty(t, v.services, "%s: %s: who is %q, want both, labeling or billing", file, v.name, who)
			// A default is a backticked value that opens the cell: one for every
			// service, or one each ("labeling `x`, billing `y`", or "`x` labeling,
			// `y` billing").
			def := row[2]
			perService := regexp.MustCompile("(labeling|billing) `([^`]*)`|`([^`]*)` (labeling|billing)").FindAllStringSubmatch(def, -1)
			switch {
			case len(perService) > 0:
				for _, m := range perService {
					if m[1] != "" {
						v.defaults[m[1]] = m[2]
					} else {
						v.defaults[m[4]] = m[3]
					}
				}
			case strings.HasPrefix(def, "`"):
				all := backticked.FindAllStringSubmatch(def, -1)
				require.Len(t, all, 1, "%s: %s: a default is one backticked value, got %q", file, v.name, def)
				for _, svc := range v.services {
					v.defaults[svc] = all[0][1]
				}
			}
			vars = append(vars, v)
		}
	}
	return vars
}

// The variables the contract lists are exactly the variables each service
// reads (envvar.LabelingVars, envvar.BillingVars), with the same services.
func TestContractVariables(t *testing.T) {
	t.Parallel()
	for _, file := range varDocs {
		docs := map[string][]string{}
		for _, v := range documentedVars(t, file) {
			require.NotContains(t, docs, v.name, "%s lists %s twice", file, v.name)
			docs[v.name] = v.services
		}
		for svc, bin := range binaries {
			var documented []string
			for name, services := range docs {
				if slices.Contains(services, svc) {
					documented = append(documented, name)
				}
			}
			require.ElementsMatch(t, bin.vars, documented,
				"the variables %s gives to %s differ from what infra/env declares for it (env.%sVars)",
				file, svc, map[string]string{"labeling": "Labeling", "billing": "Billing"}[svc])
		}
	}
}

// Every default the contract states is the one the code applies:
// setting the variable to its documented default loads the same configuration as
// leaving it unset.
func TestContractDefaults(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t"}
	load := map[string]func(envvar.Lookup) string{
		"labeling": func(l envvar.Lookup) string {
			return describe(labelingconfig.LoadLabeling(l)) + describe(envvar.LoadAuth(l))
		},
		"billing": func(l envvar.Lookup) string {
			return describe(billingconfig.LoadBilling(l)) + describe(envvar.LoadAuth(l))
		},
	}
	for _, file := range varDocs {
		checked := 0
		for _, v := range documentedVars(t, file) {
			for svc, def := range v.defaults {
				unset := load[svc](lookupOf(base))
				set := map[string]string{v.name: def}
				for k, val := range base {
					set[k] = val
				}
				require.Equal(t, unset, load[svc](lookupOf(set)),
					"%s says %s defaults to %q on %s, but setting it so changes the configuration", file, v.name, def, svc)
				checked++
			}
		}
		require.Greater(t, checked, 20, "too few defaults found in %s: is the table format still `| variable | who | default |`?", file)
	}
}

func describe[C any](c C, err error) string { return fmt.Sprintf("%+v error=%v\n", c, err) }

func lookupOf(m map[string]string) envvar.Lookup {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

// The failpoints the contract names are exactly the points infra/failpoint
// declares.
func TestContractFailpoints(t *testing.T) {
	t.Parallel()
	var documented []string
	for _, tb := range tablesWith(t, contractFile, "name", "where") {
		for _, row := range tb.rows {
			m := backticked.FindStringSubmatch(row[0])
			require.NotNil(t, m, "CONTRACT.md: failpoint %q is not backticked", row[0])
			documented = append(documented, m[1])
		}
	}
	require.ElementsMatch(t, failpointNames(t), documented,
		"the failpoints in CONTRACT.md section 6 differ from the constants of infra/failpoint")
}

// failpointNames returns the string constants of infra/failpoint (its non-test
// files, every build): the names of its points.
func failpointNames(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(root, "infra", "failpoint")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, 0)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				for _, value := range spec.(*ast.ValueSpec).Values {
					if lit, ok := value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						require.NoError(t, err)
						names = append(names, s)
					}
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}

// Every table the migrations create is listed in section 2.
func TestContractTables(t *testing.T) {
	t.Parallel()
	section := contractSection(t, 2)
	create := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_][a-z0-9_]*)`)
	// A table built under another name and renamed (SQLite rebuilds a table
	// to change its key) is listed under the name it ends with.
	rename := regexp.MustCompile(`(?i)ALTER TABLE ([a-z_][a-z0-9_]*) RENAME TO ([a-z_][a-z0-9_]*)`)
	// Only the pair's own sets: an adopter's tables (example/ledger's, a
	// team's audit_log) are its own, outside the contract, whatever
	// directory its migrations live in (docs/adopting.md).
	found := 0
	for _, set := range []migrations.Set{migrations.Labeling, migrations.Billing} {
		for dialect, files := range map[string]fs.FS{"postgres": set.FS, "sqlite": set.SQLite} {
			err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.HasSuffix(path, ".sql") {
					return err
				}
				b, err := fs.ReadFile(files, path)
				if err != nil {
					return err
				}
				renamed := map[string]bool{}
				for _, m := range rename.FindAllStringSubmatch(string(b), -1) {
					renamed[m[1]] = true
				}
				for _, m := range create.FindAllStringSubmatch(string(b), -1) {
					if renamed[m[1]] {
						continue
					}
					found++
					require.Contains(t, section, "`"+m[1]+"(", "%s (%s, %s) creates table %s, which CONTRACT.md section 2 does not list",
						path, set.Table, dialect, m[1])
				}
				return nil
			})
			require.NoError(t, err)
		}
	}
	require.Positive(t, found)
	// goose creates the version tables, not the migrations: each is listed too.
	for _, set := range []migrations.Set{migrations.Labeling, migrations.Billing} {
		require.Contains(t, section, "`"+set.Table+"(", "CONTRACT.md section 2 does not list the version table %s", set.Table)
		require.Contains(t, section, "`"+set.Marker+"`", "CONTRACT.md section 2 does not name %s, the table adoption looks for", set.Marker)
	}
	require.Contains(t, section, "`"+migrations.LegacyTable+"`")
}

// contractSection returns the text of section n of CONTRACT.md.
func contractSection(t *testing.T, n int) string {
	t.Helper()
	doc := read(t, contractFile)
	start := regexp.MustCompile(`(?m)^## ` + strconv.Itoa(n) + `\. `).FindStringIndex(doc)
	require.NotNil(t, start, "CONTRACT.md has no section %d", n)
	rest := doc[start[1]:]
	if end := regexp.MustCompile(`(?m)^## `).FindStringIndex(rest); end != nil {
		rest = rest[:end[0]]
	}
	return rest
}

// Every "contract section N" (or "CONTRACT.md sections N and M") in the
// repository names a section CONTRACT.md has, so no reference leads nowhere.
func TestContractReferences(t *testing.T) {
	t.Parallel()
	ref := regexp.MustCompile(`(?i)contract(?:\.md)?(?:'s)?\s+sections?\s+([0-9]+(?:(?:,\s*|\s+and\s+)[0-9]+)*)`)
	num := regexp.MustCompile(`[0-9]+`)
	sections := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^## ([0-9]+)\. `).FindAllStringSubmatch(read(t, contractFile), -1) {
		i, _ := strconv.Atoi(m[1])
		sections[i] = true
	}
	refs := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") && name != ".ci" && name != ".github" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".sh", ".sql":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ref.FindAllStringSubmatch(string(b), -1) {
			for _, n := range num.FindAllString(m[1], -1) {
				refs++
				i, _ := strconv.Atoi(n)
				require.True(t, sections[i], "%s cites %q, but CONTRACT.md has no section %d", path, m[0], i)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, refs, 5, "found too few contract references: is the pattern still right?")
}
