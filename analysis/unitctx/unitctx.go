package unitctx

import (
	"fmt"
	"go/ast"
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
	units := findUnits(pass)
	nested := make(map[*ast.BlockStmt]bool, len(units))
	for _, u := range units {
		nested[u.body] = true
	}
	meant := meantOutside(pass)
	for _, u := range units {
		check(pass, u, nested, meant)
	}
	return nil, nil
}

// Directive is the comment that says a call runs outside the unit of work on
// purpose (a test of what such a call does): written on the call's line, or on the
// line above it, it keeps the call from being reported.
const Directive = "//unitctx:outside"

// line is a line of a file.
type line struct {
	file string
	n    int
}

// meantOutside is the lines of the package's calls meant to run outside a unit:
// those of a Directive comment, and the lines after them.
func meantOutside(pass *analysis.Pass) map[line]bool {
	meant := make(map[line]bool)
	for _, f := range pass.Files {
		for _, group := range f.Comments {
			for _, c := range group.List {
				if strings.HasPrefix(c.Text, Directive) {
					p := pass.Fset.Position(c.Slash)
					meant[line{p.Filename, p.Line}] = true
					meant[line{p.Filename, p.Line + 1}] = true
				}
			}
		}
	}
	return meant
}

// findUnits is every function of the package that refset runs in a unit of work,
// each once.
func findUnits(pass *analysis.Pass) []unitFunc {
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
	// addArg adds the function arg is: a literal, or a function or method of this
	// package named by arg.
	addArg := func(arg ast.Expr, by string) {
		switch a := ast.Unparen(arg).(type) {
		case *ast.FuncLit:
			add(a.Type, a.Body, by)
		case *ast.Ident, *ast.SelectorExpr:
			if fn, ok := typeutil.Callee(pass.TypesInfo, &ast.CallExpr{Fun: a}).(*types.Func); ok {
				if d := decls[fn]; d != nil {
					add(d.Type, d.Body, by)
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
func check(pass *analysis.Pass, u unitFunc, nested map[*ast.BlockStmt]bool, meant map[line]bool) {
	info := pass.TypesInfo
	var param *types.Var // u's own context; nil when it is _ or unnamed
	if fields := u.typ.Params.List; len(fields) > 0 && len(fields[0].Names) > 0 {
		param, _ = info.Defs[fields[0].Names[0]].(*types.Var)
	}
	own := ownContexts(info, u, param, nested)
	derived := func(e ast.Expr) bool { return derives(info, own, e) }
	ast.Inspect(u.body, func(n ast.Node) bool {
		if lit, ok := n.(*ast.FuncLit); ok && nested[lit.Body] {
			return false // a unit of its own (InTx inside InTx), checked on its own
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		fn, ok := typeutil.Callee(info, call).(*types.Func)
		if !ok || !inModule(fn.Pkg()) || placed(info, call) ||
			strings.HasSuffix(pass.Fset.Position(fn.Pos()).Filename, "_test.go") { // a test's helper
			return true
		}
		at := 0 // the argument that is the context
		if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
			if s := info.Selections[sel]; s != nil && s.Kind() == types.MethodExpr {
				at = 1 // (*T).M(recv, ctx, ...)
			}
		}
		sig := fn.Type().(*types.Signature)
		if sig.Params().Len() == 0 || !isContext(sig.Params().At(0).Type()) || at >= len(call.Args) {
			return true
		}
		p := pass.Fset.Position(call.Pos())
		if arg := call.Args[at]; !derived(arg) && !meant[line{p.Filename, p.Line}] {
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

// placed reports whether call is told where its statements run: a method of a
// transaction or a pool (refset.Tx's ExecContext), or a call given one (AddTx,
// a Command's Execute). Its context does not pick the unit of work then.
func placed(info *types.Info, call *ast.CallExpr) bool {
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok {
		if s := info.Selections[sel]; s != nil && s.Kind() == types.MethodVal && runsSQL(s.Recv()) {
			return true
		}
	}
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

// ownContexts is the set of variables in u that hold u's own context: its parameter
// (unless it is _; what is assigned to it later is not followed), the context parameters of function
// literals inside it that are called elsewhere (what they are called with is not
// known here), and each variable declared in u, or parameter of a literal called
// where it is written (go func(ctx context.Context) {...}(ctx)), every assignment of
// which is made from one of those.
func ownContexts(info *types.Info, u unitFunc, param *types.Var, nested map[*ast.BlockStmt]bool) map[*types.Var]bool {
	own := make(map[*types.Var]bool)
	if param != nil && param.Name() != "_" {
		own[param] = true
	}
	// What each variable declared in u is assigned. A variable assigned in a way
	// not followed here (a range, a pointer) is not u's.
	assigned := make(map[*types.Var][]ast.Expr)
	var unknown []*types.Var
	declared := func(id *ast.Ident) *types.Var {
		v, _ := info.ObjectOf(id).(*types.Var)
		if v == nil || v.Pos() < u.body.Pos() || v.Pos() >= u.body.End() {
			return nil
		}
		return v
	}
	// The function literals called where they are written, with their calls.
	called := make(map[*ast.FuncLit]*ast.CallExpr)
	ast.Inspect(u.body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if lit, ok := ast.Unparen(call.Fun).(*ast.FuncLit); ok {
				called[lit] = call
			}
		}
		return true
	})
	assign := func(lhs []ast.Expr, rhs []ast.Expr) {
		for i, l := range lhs {
			id, ok := ast.Unparen(l).(*ast.Ident)
			if !ok {
				continue
			}
			v := declared(id)
			if v == nil {
				continue
			}
			switch {
			case len(rhs) == len(lhs):
				assigned[v] = append(assigned[v], rhs[i])
			case len(rhs) == 1: // v, cancel := context.WithTimeout(ctx, d)
				assigned[v] = append(assigned[v], rhs[0])
			default:
				unknown = append(unknown, v)
			}
		}
	}
	ast.Inspect(u.body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			if nested[n.Body] {
				return false
			}
			call := called[n]
			i := 0
			for _, field := range n.Type.Params.List {
				for _, name := range field.Names {
					v, ok := info.Defs[name].(*types.Var)
					switch {
					case !ok || !isContext(v.Type()):
					case call == nil:
						own[v] = true
					case i < len(call.Args) && !call.Ellipsis.IsValid():
						assigned[v] = append(assigned[v], call.Args[i])
					default:
						unknown = append(unknown, v)
					}
					i++
				}
				if len(field.Names) == 0 {
					i++
				}
			}
		case *ast.AssignStmt:
			assign(n.Lhs, n.Rhs)
		case *ast.ValueSpec:
			lhs := make([]ast.Expr, len(n.Names))
			for i, name := range n.Names {
				lhs[i] = name
			}
			assign(lhs, n.Values)
		case *ast.RangeStmt:
			for _, e := range []ast.Expr{n.Key, n.Value} {
				if id, ok := e.(*ast.Ident); ok {
					if v := declared(id); v != nil {
						unknown = append(unknown, v)
					}
				}
			}
		}
		return true
	})
	for v := range assigned {
		own[v] = true
	}
	for _, v := range unknown {
		delete(assigned, v)
		delete(own, v)
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
