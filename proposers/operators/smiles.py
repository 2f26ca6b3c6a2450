"""Operators for tasks whose answers are molecules (USPTO reactant prediction): SMILES clean-up and retro rules.

A small model rarely writes the reactants' SMILES right, so these revisions lean on chemistry, not on the model:

- ``canonical_smiles``: every reactant the answer names in RDKit's canonical form, invalid parts dropped (the
  metric compares lower-cased strings; the paper's targets are canonical RDKit SMILES);
- ``retro_rules`` / ``retro_rules_fallback``: a handful of textbook one-step disconnections keyed by the reaction
  type the question states (Boc protection, alcohol -> carbonyl oxidation, nitro/acid reductions, ester and
  ether deprotections, amide couplings, NBS brominations), applied to the product with RDKit reaction SMARTS;
  the first answers with a rule whenever one fires, the second only when the model's answer is not valid SMILES;
  ``RETRO_TYPES`` lists the reaction types the rules answer for, and ``retro_skip_<type>`` leaves one to the model.

The generated code imports RDKit inside the harness and leaves the answer alone when RDKit is not installed
(``pip install 'metaharness[chem]'``), so a revision never breaks a program.
"""

from __future__ import annotations

from collections.abc import Callable

from metaharness.proposers.operators.base import AnswerProfile, Operator
from metaharness.proposers.operators.editing import (
    SourceEditor,
    add_constants,
    append_helpers,
    constant,
    set_constant,
    wrap_predict,
)

SMILES_HELPERS = {
    "_canonical_smiles": '''
def _canonical_smiles(text):
    """The "."-joined reactants of ``text`` in RDKit's canonical form, invalid parts dropped; ``None`` when no
    part is a valid molecule or RDKit is not installed."""
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        return None
    RDLogger.DisableLog("rdApp.*")
    parts = []
    for part in str(text).strip().split():
        for piece in part.split("."):
            mol = Chem.MolFromSmiles(piece) if piece else None
            if mol is not None:
                parts.append(Chem.MolToSmiles(mol))
        break  # the first whitespace-separated token is the answer
    return ".".join(dict.fromkeys(parts)) or None
''',
    "_RETRO_RULES": """
# One-step disconnections per reaction type, tried in order on the product: (reaction SMARTS product>>reactant,
# reagent that joins the answer or "").
_RETRO_RULES = {
    "protections": [("[N:1]C(=O)OC(C)(C)C>>[N:1]", "CC(C)(C)OC(=O)OC(=O)OC(C)(C)C")],
    "oxidations": [
        ("[CX3H1:1](=O)[#6:2]>>[CH2:1](O)[#6:2]", ""),
        ("[#6:2][CX3:1](=O)[#6:3]>>[#6:2][CH1:1](O)[#6:3]", ""),
        ("[#6:1][SX3:2](=O)[#6:3]>>[#6:1][S:2][#6:3]", "O=C(OO)c1cccc(Cl)c1"),
    ],
    "reductions": [
        ("[c:1][NH2:2]>>[c:1][N+:2](=O)[O-]", ""),
        ("[CH2:1][OH:2]>>[C:1](=O)[OH:2]", ""),
        ("[c:1][OH:2]>>[c:1][O:2]C(=O)c1ccccc1", ""),
    ],
    "deprotections": [
        ("[C:1](=O)[OH:2]>>[C:1](=O)[O:2]C", ""),
        ("[c:1][OH:2]>>[c:1][O:2]C", ""),
        ("[NX3;H1,H2;!$(NC=O):1]>>[N:1]C(=O)OC(C)(C)C", ""),
    ],
    "acylation": [
        ("[#6:3][C:1](=O)[NX3;H1,H2;!$(N(C=O)C=O):2]>>[#6:3][C:1](=O)O.[N:2]", ""),
        ("[#6:3][C:1](=O)[O:2][#6:4]>>[#6:3][C:1](=O)Cl.[O:2][#6:4]", ""),
    ],
    "functional group addition": [("[CH2:1]Br>>[CH3:1]", "O=C1CCC(=O)N1Br")],
}
""",
    "_retro_rule_answer": '''
def _retro_rule_answer(question):
    """Reactants from the first rule of the question's reaction type that applies to its product, canonical and
    "."-joined; ``None`` when no rule fires or RDKit is not installed."""
    import re

    try:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import AllChem
    except ImportError:
        return None
    RDLogger.DisableLog("rdApp.*")
    kind = re.search(r"reaction type is ([^.\\n]+)", question)
    product = re.search(r"Input:\\s*(\\S+)", question)
    mol = Chem.MolFromSmiles(product.group(1)) if product else None
    if kind is None or mol is None:
        return None
    name = kind.group(1).strip().lower()
    rules = next((rules for key, rules in _RETRO_RULES.items() if name.startswith(key) and key in RETRO_TYPES), [])
    for smarts, reagent in rules:
        for outcome in AllChem.ReactionFromSmarts(smarts).RunReactants((mol,)):
            try:
                parts = []
                for piece in outcome:
                    Chem.SanitizeMol(piece)
                    parts.extend(Chem.MolToSmiles(piece).split("."))
            except Exception:
                continue
            fixed = [Chem.MolFromSmiles(part) for part in parts]
            if parts and all(m is not None for m in fixed):
                answer = [Chem.MolToSmiles(m) for m in fixed] + ([reagent] if reagent else [])
                return ".".join(answer)
    return None
''',
}


def molecules(profile: AnswerProfile) -> bool:
    return profile.smiles


def _no_wrap(tag: str) -> Callable[[SourceEditor], bool]:
    return lambda editor: f"_predict_before_{tag}" not in editor.source


def _canonical(source: str) -> tuple[str, str]:
    source = wrap_predict(
        source,
        "canonical",
        "if not isinstance(answer, str):\n    return answer\nreturn _canonical_smiles(answer) or answer\n",
    )
    return append_helpers(source, SMILES_HELPERS), "write every reactant in RDKit's canonical SMILES, drop invalid ones"


def _rules(fallback_only: bool) -> Callable[[str], tuple[str, str]]:
    def apply(source: str) -> tuple[str, str]:
        tag = "rules_fallback" if fallback_only else "rules"
        valid = "if isinstance(answer, str) and _canonical_smiles(answer):\n    return answer\n"
        guard = valid if fallback_only else ""
        source = wrap_predict(source, tag, guard + "ruled = _retro_rule_answer(x)\nreturn ruled or answer\n")
        what = "when the model's answer is not valid SMILES" if fallback_only else "whenever a rule fires"
        source = add_constants(
            source, {"RETRO_TYPES": list(RETRO_TYPES)}, "Reaction types the retro rules answer (the rest: the model)."
        )
        return append_helpers(source, SMILES_HELPERS), (
            f"answer with a one-step retro rule for the stated reaction type (RDKit reaction SMARTS) {what}"
        )

    return apply


def _no_rules(editor: SourceEditor) -> bool:
    return "_predict_before_rules" not in editor.source


# The reaction types of ``_RETRO_RULES``, in its order.
RETRO_TYPES = ("protections", "oxidations", "reductions", "deprotections", "acylation", "functional group addition")


def _retro_skip(kind: str) -> Operator:
    """Leave reaction type ``kind`` to the model: drop it from ``RETRO_TYPES`` (once the rules are there)."""

    def can(editor: SourceEditor) -> bool:
        types = constant(editor, "RETRO_TYPES")
        return isinstance(types, list) and kind in types

    def apply(source: str) -> tuple[str, str]:
        types = constant(source, "RETRO_TYPES")
        assert isinstance(types, list)
        return set_constant(source, "RETRO_TYPES", [t for t in types if t != kind]), (
            f"no retro rule for {kind}: the model answers those reactions"
        )

    return Operator(
        f"retro_skip_{kind.replace(' ', '_')}",
        f"retro rules no longer answer {kind}",
        can,
        apply,
        fits=molecules,
        post_processing=True,
        family="retro_types",
    )


SMILES_OPERATORS: tuple[Operator, ...] = (
    Operator(
        "canonical_smiles",
        "answer clean-up: canonical SMILES, invalid parts dropped",
        _no_wrap("canonical"),
        _canonical,
        fits=molecules,
        post_processing=True,
    ),
    Operator(
        "retro_rules",
        "model-free one-step retro rules by reaction type, preferred to the model's answer",
        _no_rules,
        _rules(False),
        fits=molecules,
        post_processing=True,
    ),
    Operator(
        "retro_rules_fallback",
        "model-free one-step retro rules by reaction type when the model's answer is not valid SMILES",
        _no_rules,
        _rules(True),
        fits=molecules,
        post_processing=True,
    ),
    *(_retro_skip(kind) for kind in RETRO_TYPES),
)
