// Command filegraph measures how the files of a Go package depend on one
// another: file A uses file B when an identifier in A refers to a name
// declared in B (a package-level name, a method, or a struct field),
// resolved with go/types. It prints the strongly connected sets of files
// (Tarjan), largest first: a file in a set of one can be read with only
// the files it uses, while the files of a bigger set all reach each other.
//
//	go run ./internal/filegraph [-tests] [-v] [-long N] [-methods T] [dir]
//
// dir defaults to the current directory. Test files are left out unless
// -tests is given. -v lists the files of every set of two or more, and,
// for the largest, the edges that hold it together. -long N also lists
// the functions longer than N lines, and -methods T counts (and lists)
// the exported methods of type T.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

func main() {
	tests := flag.Bool("tests", false, "include _test.go files of the package (not the external _test package)")
	verbose := flag.Bool("v", false, "list the files of each set, and the edges of the largest")
	long := flag.Int("long", 0, "list the functions longer than this many lines (0: none)")
	methods := flag.String("methods", "", "count the exported methods of this type")
	flag.Parse()
	dir := "."
	if flag.NArg() > 0 {
		dir = flag.Arg(0)
	}
	if err := run(dir, *tests, *verbose, *long, *methods); err != nil {
		fmt.Fprintln(os.Stderr, "filegraph:", err)
		os.Exit(1)
	}
}

// graph is a package's files and the names they use from one another.
type graph struct {
	fset  *token.FileSet
	files []*ast.File
	tpkg  *types.Package
	nodes map[string]bool
	edges map[string]map[string][]string // from -> to -> names
	lines int
}

// name is the file of p.
func (g *graph) name(p token.Pos) string { return filepath.Base(g.fset.Position(p).Filename) }

// load type-checks the package in dir (with its _test.go files when
// tests) and finds its files' edges.
func load(dir string, tests bool) (*graph, error) {
	g := &graph{fset: token.NewFileSet(), nodes: map[string]bool{}, edges: map[string]map[string][]string{}}
	fset := g.fset
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	pkgName := ""
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || (!tests && strings.HasSuffix(n, "_test.go")) {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(f.Name.Name, "_test") {
			continue // the external test package
		}
		pkgName = f.Name.Name
		g.files = append(g.files, f)
	}
	if len(g.files) == 0 {
		return nil, fmt.Errorf("no package in %s", dir)
	}
	files := g.files
	sort.Slice(files, func(i, j int) bool { return fset.File(files[i].Pos()).Name() < fset.File(files[j].Pos()).Name() })
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil), Error: func(error) {}}
	g.tpkg, _ = conf.Check(pkgName, fset, files, info)
	for _, f := range files {
		g.nodes[g.name(f.Pos())] = true
		g.lines += fset.File(f.Pos()).LineCount()
	}
	add := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != g.tpkg || !obj.Pos().IsValid() {
			return
		}
		if !declaredOutsideFuncs(obj, g.tpkg) {
			return // a local variable, parameter or type of a function
		}
		from, to := g.name(at), g.name(obj.Pos())
		if from == to || !g.nodes[to] {
			return
		}
		if g.edges[from] == nil {
			g.edges[from] = map[string][]string{}
		}
		if !slices.Contains(g.edges[from][to], obj.Name()) {
			g.edges[from][to] = append(g.edges[from][to], obj.Name())
		}
	}
	for id, obj := range info.Uses {
		add(id.Pos(), obj)
	}
	return g, nil
}

// sets are g's strongly connected sets of files, largest first.
func (g *graph) sets() [][]string {
	sets := tarjan(g.nodes, g.edges)
	sort.SliceStable(sets, func(i, j int) bool { return len(sets[i]) > len(sets[j]) })
	return sets
}

func run(dir string, tests, verbose bool, long int, methods string) error {
	g, err := load(dir, tests)
	if err != nil {
		return err
	}
	fset, files, tpkg, nodes, edges, lines, name := g.fset, g.files, g.tpkg, g.nodes, g.edges, g.lines, g.name
	sets := g.sets()
	fmt.Printf("files %d, lines %d, largest strongly connected set %d files\n", len(nodes), lines, len(sets[0]))
	for i, s := range sets {
		if len(s) < 2 {
			break
		}
		fmt.Printf("set %d: %d files\n", i+1, len(s))
		if verbose {
			fmt.Printf("  %s\n", strings.Join(s, " "))
		}
	}
	if verbose && len(sets[0]) > 1 {
		in := map[string]bool{}
		for _, f := range sets[0] {
			in[f] = true
		}
		fmt.Println("edges inside the largest set (from -> to: names):")
		for _, from := range sets[0] {
			tos := make([]string, 0, len(edges[from]))
			for to := range edges[from] {
				if in[to] {
					tos = append(tos, to)
				}
			}
			slices.Sort(tos)
			for _, to := range tos {
				ns := edges[from][to]
				slices.Sort(ns)
				fmt.Printf("  %s -> %s: %s\n", from, to, strings.Join(ns, " "))
			}
		}
	}
	if long > 0 {
		n := 0
		for _, f := range files {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				l := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
				if l > long {
					n++
					fmt.Printf("long: %s %s %d lines\n", name(fd.Pos()), funcName(fd), l)
				}
			}
		}
		fmt.Printf("functions longer than %d lines: %d\n", long, n)
	}
	if methods != "" {
		obj := tpkg.Scope().Lookup(methods)
		if obj == nil {
			return fmt.Errorf("no type %s", methods)
		}
		ms := types.NewMethodSet(types.NewPointer(obj.Type()))
		var names []string
		for m := range ms.Methods() {
			if m.Obj().Exported() {
				names = append(names, m.Obj().Name())
			}
		}
		fmt.Printf("exported methods of %s: %d\n  %s\n", methods, len(names), strings.Join(names, " "))
	}
	return nil
}

// funcName spells a function as Recv.Name or Name.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// declaredOutsideFuncs reports whether obj is a name that a file declares
// for others: a package-level name, a method, or a struct field.
func declaredOutsideFuncs(obj types.Object, pkg *types.Package) bool {
	switch o := obj.(type) {
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.Func:
		return o.Signature().Recv() != nil || o.Parent() == pkg.Scope()
	}
	return obj.Parent() == pkg.Scope()
}

// tarjan returns the strongly connected components of the graph.
func tarjan(nodes map[string]bool, edges map[string]map[string][]string) [][]string {
	index, low := map[string]int{}, map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	var visit func(v string)
	visit = func(v string) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		tos := make([]string, 0, len(edges[v]))
		for w := range edges[v] {
			tos = append(tos, w)
		}
		slices.Sort(tos)
		for _, w := range tos {
			if _, seen := index[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var set []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				set = append(set, w)
				if w == v {
					break
				}
			}
			slices.Sort(set)
			out = append(out, set)
		}
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	return out
}
