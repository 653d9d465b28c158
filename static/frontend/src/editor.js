// What Undoable's pages need from CodeMirror 6 and ansi_up, bundled once by esbuild into
// static/vendor/undoable-editor.js (global `UndoableEditor`). Rebuild: `make frontend`.
import { EditorView, basicSetup } from "codemirror";
import { keymap } from "@codemirror/view";
import { Compartment, EditorState, Prec } from "@codemirror/state";
import { indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { StreamLanguage } from "@codemirror/language";
import { shell } from "@codemirror/legacy-modes/mode/shell";
import { oneDark } from "@codemirror/theme-one-dark";
import { MergeView, unifiedMergeView } from "@codemirror/merge";
import { AnsiUp } from "ansi_up";

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
        theme.of(options.dark ? oneDark : []),
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
    setDark: (dark) => view.dispatch({ effects: theme.reconfigure(dark ? oneDark : []) }),
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
    options.dark ? oneDark : [],
  ];
  return new MergeView({
    parent,
    a: { doc: options.original, extensions: readOnly },
    b: { doc: options.modified, extensions: readOnly },
    collapseUnchanged: { margin: 3, minSize: 6 },
  });
}

export { AnsiUp, unifiedMergeView };
