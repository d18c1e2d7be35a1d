// The parsed form of a Jinja template: expression and statement nodes, immutable after parsing so
// that one parsed template renders on many threads at once.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace serve8::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // children: items
  kTuple,      // children: items
  kDict,       // children: key, value, key, value, ...
  kGetAttr,    // children[0].name
  kGetItem,    // children[0][children[1]]
  kSlice,      // children[0][children[1]:children[2]:children[3]] (absent parts null)
  kCall,       // children[0](children[1..], kwargs)
  kFilter,     // children[0] | name(children[1..], kwargs); children[0] null in a filter block
  kTest,       // children[0] is [not] name(children[1..])
  kUnary,      // name: "-", "+" or "not"; children[0]
  kBinary,     // name: "+", "-", "*", "/", "//", "%", "**", "~", "and", "or"; children[0], children[1]
  kCompare,    // children[0] ops[0] children[1] ops[1] children[2] ... ("==", "<", "in", "notin", ...)
  kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (condition, body); else_body
  kFor,          // for targets in expr [if condition]: body; else_body
  kSet,          // set targets = expr, or set expr.attr = value (target_object set)
  kSetBlock,     // {% set name %}body{% endset %}
  kMacro,        // macro name(params): body
  kFilterBlock,  // {% filter f %}body{% endfilter %}: expr is the filter with a null operand
  kBreak,
  kContinue,
  kScope,  // a body rendered as is ({% generation %} of HF's AssistantTracker)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr target_object;  // kSet on a namespace attribute: target_object.name
  std::string name;
  std::vector<std::string> targets;
  std::vector<std::pair<ExprPtr, Body>> branches;
  std::vector<std::pair<std::string, ExprPtr>> params;  // macro parameters with defaults (null: none)
  Body body;
  Body else_body;
};

}  // namespace serve8::jinja
