package unitctx

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// Analyzer reports calls of refset made inside a unit of work with a context other
// than the unit's own (see the package doc).
var Analyzer = &analysis.Analyzer{
	Name: "unitctx",
	Doc: "check that calls of refset inside a unit of work use the unit's context\n\n" +
		"Inside the function refset.InTx runs (or a refset.Command), a call of refset made with any " +
		"context but the function's own runs outside the unit of work: on SQLite it fails or waits for " +
		"the writer the unit holds, on PostgreSQL it commits apart from the unit.",
	URL: "https://pkg.go.dev/github.com/refsetdb/refset/analysis/unitctx",
	Run: run,
}

// module is refset's module path: the functions of its packages are the ones whose
// context decides which unit of work a call joins.
const module = "github.com/refsetdb/refset"

// unitFunc is a function refset runs in a unit of work.
type unitFunc struct {
	typ  *ast.FuncType
	body *ast.BlockStmt
	by   string // what runs it, for messages: "refset.InTx"
}

func run(pass *analysis.Pass) (any, error) {
	vars := varsOf(pass)
	units := findUnits(pass, vars)
	nested := make(map[*ast.BlockStmt]bool, len(units))
	for _, u := range units {
		nested[u.body] = true
	}
	meant := meantOutside(pass)
	for _, u := range units {
		check(pass, u, vars, nested, meant)
	}
	return nil, nil
}

// variables is what the package does with its variables: the values each is
// assigned (by =, := or var), which of them a statement declares (not a
// parameter or a result), which have their address taken, and which are assigned
// otherwise.
type variables struct {
	values    map[*types.Var][]ast.Expr
	declared  map[*types.Var]bool
	addressed map[*types.Var]bool
	unknown   map[*types.Var]bool // assigned in a way not followed (by a range, or an operator: +=)
}

func varsOf(pass *analysis.Pass) *variables {
	vs := &variables{
		values:    make(map[*types.Var][]ast.Expr),
		declared:  make(map[*types.Var]bool),
		addressed: make(map[*types.Var]bool),
		unknown:   make(map[*types.Var]bool),
	}
	info := pass.TypesInfo
	varOf := func(e ast.Expr) *types.Var {
		if id, ok := ast.Unparen(e).(*ast.Ident); ok {
			v, _ := info.ObjectOf(id).(*types.Var)
			return v
		}
		return nil
	}
	assign := func(lhs, rhs []ast.Expr) {
		for i, l := range lhs {
			v := varOf(l)
			if v == nil {
				continue
			}
			switch {
			case len(rhs) == 0: // var v T: the zero value, no context
			case len(rhs) == len(lhs):
				vs.values[v] = append(vs.values[v], rhs[i])
			case len(rhs) == 1: // v, cancel := context.WithTimeout(ctx, d)
				vs.values[v] = append(vs.values[v], rhs[0])
			default:
				vs.unknown[v] = true
			}
		}
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if n.Tok == token.DEFINE {
					for _, l := range n.Lhs {
						if id, ok := l.(*ast.Ident); ok {
							if v, ok := info.Defs[id].(*types.Var); ok {
								vs.declared[v] = true
							}
						}
					}
				}
				if n.Tok == token.ASSIGN || n.Tok == token.DEFINE {
					assign(n.Lhs, n.Rhs)
				} else { // c += ...: not a context
					for _, l := range n.Lhs {
						if v := varOf(l); v != nil {
							vs.unknown[v] = true
						}
					}
				}
			case *ast.ValueSpec:
				lhs := make([]ast.Expr, len(n.Names))
				for i, name := range n.Names {
					lhs[i] = name
					if v, ok := info.Defs[name].(*types.Var); ok {
						vs.declared[v] = true
					}
				}
				assign(lhs, n.Values)
			case *ast.RangeStmt:
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if v := varOf(e); v != nil {
						vs.unknown[v] = true
					}
				}
			case *ast.UnaryExpr:
				if n.Op == token.AND {
					if v := varOf(n.X); v != nil {
						vs.addressed[v] = true
					}
				}
			}
			return true
		})
	}
	return vs
}

// followed reports whether every value v holds is one of vs.values[v]: a variable
// a statement declares, assigned only by =, := or var, whose address is not taken.
func (vs *variables) followed(v *types.Var) bool {
	return vs.declared[v] && !vs.addressed[v] && !vs.unknown[v]
}

// Directive is the comment that says a call runs outside the unit of work on
// purpose (a test of what such a call does): written after the call on its line
// (the line it begins on, or the line of its context argument), or alone on the
// line above one of those, it keeps the call from being reported.
const Directive = "//unitctx:outside"

// line is a line of a file.
type line struct {
	file string
	n    int
}

// meantOutside is the lines of the package's calls meant to run outside a unit:
// that of each Directive comment, and the line after one that is alone on its
// line (a directive after code is that code's, not the next line's).
func meantOutside(pass *analysis.Pass) map[line]bool {
	meant := make(map[line]bool)
	for _, f := range pass.Files {
		var directives []*ast.Comment
		for _, group := range f.Comments {
			for _, c := range group.List {
				if rest, ok := strings.CutPrefix(c.Text, Directive); ok &&
					(rest == "" || rest[0] == ' ' || rest[0] == '\t') {
					directives = append(directives, c)
				}
			}
		}
		if len(directives) == 0 {
			continue
		}
		// The first column of code on each line: where a node begins or ends.
		first := make(map[int]int)
		mark := func(pos token.Pos) {
			p := pass.Fset.Position(pos)
			if c, ok := first[p.Line]; !ok || p.Column < c {
				first[p.Line] = p.Column
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n.(type) {
			case nil, *ast.File, *ast.Comment, *ast.CommentGroup:
			default:
				mark(n.Pos())
				mark(n.End() - 1)
			}
			return true
		})
		for _, c := range directives {
			p := pass.Fset.Position(c.Slash)
			meant[line{p.Filename, p.Line}] = true
			if col, ok := first[p.Line]; !ok || col > p.Column {
				meant[line{p.Filename, p.Line + 1}] = true // alone on its line
			}
		}
	}
	return meant
}

// findUnits is every function of the package that refset runs in a unit of work,
// each once.
func findUnits(pass *analysis.Pass, vars *variables) []unitFunc {
	decls := make(map[*types.Func]*ast.FuncDecl)
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					decls[fn] = fd
				}
			}
		}
	}
	var units []unitFunc
	seen := make(map[*ast.BlockStmt]bool)
	add := func(typ *ast.FuncType, body *ast.BlockStmt, by string) {
		if body != nil && !seen[body] {
			seen[body] = true
			units = append(units, unitFunc{typ: typ, body: body, by: by})
		}
	}
	// addArg adds the function arg is: a literal, a function or method of this
	// package named by arg (generic ones instantiated too), what a variable of the
	// package is assigned, or any of those converted to a function type.
	following := make(map[*types.Var]bool)
	var addArg func(arg ast.Expr, by string)
	addArg = func(arg ast.Expr, by string) {
		switch a := ast.Unparen(arg).(type) {
		case *ast.FuncLit:
			add(a.Type, a.Body, by)
		case *ast.CallExpr:
			if tv, ok := pass.TypesInfo.Types[a.Fun]; ok && tv.IsType() && len(a.Args) == 1 {
				addArg(a.Args[0], by) // unitFunc(func(ctx context.Context, tx refset.Tx) error {...})
			}
		case *ast.Ident, *ast.SelectorExpr, *ast.IndexExpr, *ast.IndexListExpr:
			switch obj := typeutil.Callee(pass.TypesInfo, &ast.CallExpr{Fun: a}).(type) {
			case *types.Func:
				if d := decls[obj.Origin()]; d != nil {
					add(d.Type, d.Body, by)
				}
			case *types.Var: // work := func(ctx context.Context, tx refset.Tx) error {...}
				if vars.declared[obj] && !following[obj] {
					following[obj] = true
					for _, value := range vars.values[obj] {
						addArg(value, by)
					}
				}
			}
		}
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				// A refset.Command's Execute runs in the unit of the call it is given to.
				fn, _ := pass.TypesInfo.Defs[n.Name].(*types.Func)
				if n.Recv != nil && n.Name.Name == "Execute" && fn != nil && unitSignature(fn.Type()) {
					add(n.Type, n.Body, "a refset.Command's Execute")
				}
			case *ast.CallExpr:
				if tv, ok := pass.TypesInfo.Types[n.Fun]; ok && tv.IsType() {
					// A conversion to a function type of refset's (refset.CommandFunc).
					if len(n.Args) == 1 && inModule(typePackage(tv.Type)) && unitSignature(tv.Type.Underlying()) {
						addArg(n.Args[0], types.ExprString(n.Fun))
					}
					return true
				}
				fn, ok := typeutil.Callee(pass.TypesInfo, n).(*types.Func)
				if !ok || !inModule(fn.Pkg()) {
					return true
				}
				sig := fn.Type().(*types.Signature)
				for i, arg := range n.Args {
					if unitSignature(paramType(sig, i)) {
						addArg(arg, types.ExprString(n.Fun))
					}
				}
			}
			return true
		})
	}
	return units
}

// check reports each call of refset in u made with a context other than u's own.
// nested are the bodies of every unit's function, which are checked on their own.
func check(pass *analysis.Pass, u unitFunc, vars *variables, nested map[*ast.BlockStmt]bool, meant map[line]bool) {
	info := pass.TypesInfo
	var param *types.Var // u's own context; nil when it is _ or unnamed
	if fields := u.typ.Params.List; len(fields) > 0 && len(fields[0].Names) > 0 {
		param, _ = info.Defs[fields[0].Names[0]].(*types.Var)
	}
	own := ownContexts(info, u, param, vars, nested)
	derived := func(e ast.Expr) bool { return derives(info, own, e) }
	ast.Inspect(u.body, func(n ast.Node) bool {
		if lit, ok := n.(*ast.FuncLit); ok && nested[lit.Body] {
			return false // a unit of its own (InTx inside InTx), checked on its own
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fn, at, onSQL := vars.callee(info, call.Fun, 0)
		if fn == nil || !inModule(fn.Pkg()) || onSQL || givenSQL(info, call) ||
			strings.HasSuffix(pass.Fset.Position(fn.Pos()).Filename, "_test.go") { // a test's helper
			return true
		}
		sig := fn.Type().(*types.Signature)
		if sig.Params().Len() == 0 || !isContext(sig.Params().At(0).Type()) || at >= len(call.Args) {
			return true
		}
		arg := call.Args[at]
		p, q := pass.Fset.Position(call.Pos()), pass.Fset.Position(arg.Pos())
		if !derived(arg) && !meant[line{p.Filename, p.Line}] && !meant[line{q.Filename, q.Line}] {
			pass.Report(analysis.Diagnostic{
				Pos: arg.Pos(),
				End: arg.End(),
				Message: fmt.Sprintf("refset call %s made with context %s inside the unit of work of %s; %s, or the call runs outside the unit (on SQLite it fails with ErrInUnitOfWork or waits for the writer the unit holds, on PostgreSQL it commits apart from the unit)",
					types.ExprString(call.Fun), types.ExprString(arg), u.by, useInstead(u, param)),
			})
		}
		return true
	})
}

// callee is the function or method of refset's module that a call of fun calls,
// the index of the call's argument that is its context (1 for a method expression,
// (*T).M(recv, ctx, ...)), and whether it is a method of a transaction or a pool
// (refset.Tx's ExecContext), which is told where its statements run: its context
// does not pick the unit of work. A variable the package declares is followed to
// what it is assigned (add := set.Add), when that is one function every time.
// depth bounds how many variables are followed.
func (vs *variables) callee(info *types.Info, fun ast.Expr, depth int) (fn *types.Func, at int, onSQL bool) {
	fun = ast.Unparen(fun)
	switch obj := typeutil.Callee(info, &ast.CallExpr{Fun: fun}).(type) {
	case *types.Func:
		if sel, ok := fun.(*ast.SelectorExpr); ok {
			if s := info.Selections[sel]; s != nil {
				switch s.Kind() {
				case types.MethodExpr:
					at = 1
				case types.MethodVal:
					onSQL = runsSQL(s.Recv())
				}
			}
		}
		return obj, at, onSQL
	case *types.Var:
		if depth > 8 || !vs.followed(obj) {
			return nil, 0, false
		}
		for i, value := range vs.values[obj] {
			f, a, o := vs.callee(info, value, depth+1)
			if f == nil || i > 0 && (f.Origin() != fn.Origin() || a != at) {
				return nil, 0, false
			}
			fn, at, onSQL = f, a, onSQL || o
		}
		return fn, at, onSQL
	}
	return nil, 0, false
}

// givenSQL reports whether call is given a transaction or a pool (AddTx, a
// Command's Execute), which tells it where its statements run: its context does
// not pick the unit of work then.
func givenSQL(info *types.Info, call *ast.CallExpr) bool {
	for _, arg := range call.Args {
		if tv, ok := info.Types[arg]; ok && !tv.IsType() && tv.Type != nil && runsSQL(tv.Type) {
			return true
		}
	}
	return false
}

// runsSQL reports whether t runs statements itself, as refset.Querier does: a
// transaction, a connection or a pool.
func runsSQL(t types.Type) bool {
	obj, _, _ := types.LookupFieldOrMethod(t, true, nil, "ExecContext")
	fn, ok := obj.(*types.Func)
	if !ok {
		return false
	}
	params := fn.Type().(*types.Signature).Params()
	return params.Len() >= 2 && isContext(params.At(0).Type())
}

// useInstead says what context a call in u should pass.
func useInstead(u unitFunc, param *types.Var) string {
	if param == nil || param.Name() == "_" {
		return fmt.Sprintf("name the context %s passes its function (the function's first parameter is _ or unnamed) and use it", u.by)
	}
	return fmt.Sprintf("use the context %s passes its function (parameter %s)", u.by, param.Name())
}

// ownContexts is the set of variables in u that hold u's own context. They are
// its parameter, unless it is _; the context parameters of function literals
// inside it whose calls are not all seen here (a callback given to a retry helper:
// what it is called with is not known); each variable declared in u; and each
// context parameter of a literal called where it is written (go func(ctx
// context.Context) {...}(ctx)) or held in a variable that u only calls (save :=
// func(ctx context.Context) error {...}; save(ctx)) — each of them only if every
// value it is assigned (by =, := or var, and for a parameter every argument it is
// called with) is made from one of the set. A variable assigned in a way not
// followed here (a range, a pointer) is not u's.
func ownContexts(info *types.Info, u unitFunc, param *types.Var, vars *variables, nested map[*ast.BlockStmt]bool) map[*types.Var]bool {
	own := make(map[*types.Var]bool)
	assigned := make(map[*types.Var][]ast.Expr) // what each of own must be made from
	consider := func(v *types.Var, values []ast.Expr) {
		if vars.addressed[v] || vars.unknown[v] {
			return
		}
		own[v] = true
		assigned[v] = append(assigned[v], values...)
	}
	if param != nil && param.Name() != "_" {
		consider(param, vars.values[param]) // and what it is assigned later
	}
	// The calls of each function literal in u: where it is written, or of the
	// variable that holds it. Identifiers in units nested in u are used elsewhere.
	called := make(map[*ast.FuncLit][]*ast.CallExpr)
	calledBy := make(map[*ast.Ident]*ast.CallExpr) // a call of a variable
	inNested := make(map[*ast.Ident]bool)
	var (
		lits   []*ast.FuncLit
		idents []*ast.Ident // in u, nested units and all
		decls  []*ast.Ident // of variables declared in u, outside nested units
	)
	ast.Inspect(u.body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Ident:
			idents = append(idents, n)
			if info.Defs[n] != nil {
				decls = append(decls, n)
			}
		case *ast.FuncLit:
			if nested[n.Body] {
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if id, ok := m.(*ast.Ident); ok {
						inNested[id] = true
						idents = append(idents, id)
					}
					return true
				})
				return false
			}
			lits = append(lits, n)
		case *ast.CallExpr:
			switch fun := ast.Unparen(n.Fun).(type) {
			case *ast.FuncLit:
				called[fun] = append(called[fun], n)
			case *ast.Ident:
				calledBy[fun] = n
			}
		}
		return true
	})
	// held is the literal each variable declared in u holds, if that is its only value.
	held := make(map[*types.Var]*ast.FuncLit)
	for _, d := range decls {
		if v, ok := info.Defs[d].(*types.Var); ok && vars.followed(v) && len(vars.values[v]) == 1 {
			if lit, ok := ast.Unparen(vars.values[v][0]).(*ast.FuncLit); ok && !nested[lit.Body] && len(called[lit]) == 0 {
				held[v] = lit
			}
		}
	}
	escaped := make(map[*types.Var]bool) // held, and used otherwise than called
	for _, id := range idents {
		v, ok := info.Uses[id].(*types.Var)
		if !ok || held[v] == nil {
			continue
		}
		if call := calledBy[id]; call == nil || inNested[id] {
			escaped[v] = true
		} else {
			called[held[v]] = append(called[held[v]], call)
		}
	}
	for v, lit := range held {
		if escaped[v] {
			delete(called, lit)
		}
	}
	for _, lit := range lits {
		calls, seen := called[lit]
		i := 0
		for _, field := range lit.Type.Params.List {
			for _, name := range field.Names {
				v, ok := info.Defs[name].(*types.Var)
				if ok && isContext(v.Type()) {
					args := vars.values[v] // what it is assigned in the literal
					known := true
					for _, call := range calls {
						if i >= len(call.Args) || call.Ellipsis.IsValid() {
							known = false
							break
						}
						args = append(args, call.Args[i])
					}
					if known || !seen {
						consider(v, args)
					}
				}
				i++
			}
			if len(field.Names) == 0 {
				i++
			}
		}
	}
	for _, d := range decls {
		if v, ok := info.Defs[d].(*types.Var); ok && vars.declared[v] && len(vars.values[v]) > 0 {
			consider(v, vars.values[v])
		}
	}
	// The largest set closed under "every assignment is made from the set": drop a
	// variable with an assignment made from elsewhere until none is left.
	for changed := true; changed; {
		changed = false
		for v, values := range assigned {
			if !own[v] {
				continue
			}
			for _, e := range values {
				if !derives(info, own, e) {
					delete(own, v)
					changed = true
					break
				}
			}
		}
	}
	return own
}

// derives reports whether e is one of the own contexts, or made from one: a call
// whose first argument is (context.WithTimeout(ctx, d), a tracer's Start(ctx, name)).
func derives(info *types.Info, own map[*types.Var]bool, e ast.Expr) bool {
	switch e := ast.Unparen(e).(type) {
	case *ast.Ident:
		v, ok := info.ObjectOf(e).(*types.Var)
		return ok && own[v]
	case *ast.CallExpr:
		if tv, ok := info.Types[e.Fun]; ok && tv.IsType() {
			return len(e.Args) == 1 && derives(info, own, e.Args[0]) // a conversion
		}
		return len(e.Args) > 0 && derives(info, own, e.Args[0])
	}
	return false
}

// unitSignature reports whether t is a function refset runs in a unit of work: it
// takes a context.Context first, and a refset.Tx.
func unitSignature(t types.Type) bool {
	sig, ok := t.(*types.Signature)
	if !ok || sig.Params().Len() < 2 || !isContext(sig.Params().At(0).Type()) {
		return false
	}
	for i := 1; i < sig.Params().Len(); i++ {
		if named, ok := types.Unalias(sig.Params().At(i).Type()).(*types.Named); ok &&
			named.Obj().Name() == "Tx" && inModule(named.Obj().Pkg()) {
			return true
		}
	}
	return false
}

// paramType is the type of sig's parameter that argument i is passed for.
func paramType(sig *types.Signature, i int) types.Type {
	params := sig.Params()
	if sig.Variadic() && i >= params.Len()-1 {
		if s, ok := params.At(params.Len() - 1).Type().(*types.Slice); ok {
			return s.Elem().Underlying()
		}
		return nil
	}
	if i >= params.Len() {
		return nil
	}
	return params.At(i).Type().Underlying()
}

// isContext reports whether t is context.Context.
func isContext(t types.Type) bool {
	named, ok := types.Unalias(t).(*types.Named)
	return ok && named.Obj().Name() == "Context" && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == "context"
}

// typePackage is the package that declares t, if it is a named type.
func typePackage(t types.Type) *types.Package {
	if named, ok := types.Unalias(t).(*types.Named); ok {
		return named.Obj().Pkg()
	}
	return nil
}

// inModule reports whether pkg is one of refset's module.
func inModule(pkg *types.Package) bool {
	return pkg != nil && (pkg.Path() == module || strings.HasPrefix(pkg.Path(), module+"/"))
}
