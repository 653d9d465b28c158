// What Undoable's pages need from CodeMirror 6 and ansi_up, bundled once by esbuild into
// static/vendor/undoable-editor.js (global `UndoableEditor`). Rebuild: `make frontend`.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { Compartment, EditorState, Prec } from "@codemirror/state";
import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import {
  HighlightStyle,
  StreamLanguage,
  defaultHighlightStyle,
  syntaxHighlighting,
} from "@codemirror/language";
import { shell } from "@codemirror/legacy-modes/mode/shell";
import { oneDarkHighlightStyle, oneDarkTheme } from "@codemirror/theme-one-dark";
import { MergeView, unifiedMergeView } from "@codemirror/merge";
import { AnsiUp } from "ansi_up";

// CodeMirror's own colours that miss WCAG AA (4.5:1) on their editor's background, with the
// nearest shade that reaches it (tests/browser/test_accessibility.py runs axe-core on the pages).
const AA_SHADES = {
  "#e40": "#c02c00", // light: escapes, regexps
  "#085": "#007a4c", // light: special strings
  "#f00": "#d00000", // light: invalid
  "#c678dd": "#d190e6", // one-dark: keywords
  "#e06c75": "#e8808a", // one-dark: names
  "#7d8799": "#939cac", // one-dark: comments, line numbers
};

function readable(style) {
  return HighlightStyle.define(
    style.specs.map((spec) => (AA_SHADES[spec.color] ? { ...spec, color: AA_SHADES[spec.color] } : spec)),
  );
}

const lightLook = [
  syntaxHighlighting(readable(defaultHighlightStyle)),
  EditorView.theme({ ".cm-placeholder": { color: "#6b6b6b" } }),
];
const darkLook = [
  oneDarkTheme,
  syntaxHighlighting(readable(oneDarkHighlightStyle)),
  EditorView.theme({ ".cm-gutters": { color: AA_SHADES["#7d8799"] } }, { dark: true }),
];
const look = (dark) => (dark ? darkLook : lightLook);

function languageFor(name) {
  return name === "bash" ? StreamLanguage.define(shell) : python();
}

// An editor with Python/bash highlighting, Tab indentation (Escape then Tab leaves the editor,
// CodeMirror's documented keyboard escape hatch) and Ctrl/Cmd+Enter bound to `onRun`.
export function createEditor(parent, options) {
  const theme = new Compartment();
  const language = new Compartment();
  const view = new EditorView({
    parent,
    state: EditorState.create({
      doc: options.doc || "",
      extensions: [
        basicSetup,
        Prec.highest(
          keymap.of([
            {
              key: "Mod-Enter",
              run: () => {
                if (options.onRun) options.onRun();
                return true;
              },
            },
          ]),
        ),
        keymap.of([indentWithTab]),
        language.of(languageFor(options.language)),
        theme.of(look(options.dark)),
        EditorView.contentAttributes.of({ "aria-label": options.label || "Code editor" }),
        EditorView.updateListener.of((update) => {
          if (update.docChanged && options.onChange) options.onChange(update.state.doc.toString());
        }),
      ],
    }),
  });
  return {
    view,
    getValue: () => view.state.doc.toString(),
    setValue: (text) =>
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } }),
    setDark: (dark) => view.dispatch({ effects: theme.reconfigure(look(dark)) }),
    focus: () => view.focus(),
  };
}

// A read-only side-by-side diff: `original` (left) against `modified` (right).
export function createDiff(parent, options) {
  const readOnly = [
    basicSetup,
    EditorState.readOnly.of(true),
    EditorView.editable.of(false),
    languageFor(options.language),
    look(options.dark),
  ];
  return new MergeView({
    parent,
    a: { doc: options.original, extensions: readOnly },
    b: { doc: options.modified, extensions: readOnly },
    collapseUnchanged: { margin: 3, minSize: 6 },
  });
}

export { AnsiUp, unifiedMergeView };
