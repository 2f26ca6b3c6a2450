"""Retrieval USPTO harness: the training reactions most similar to the product (BM25 on SMILES 4-grams).

BM25 (k1=1.5, b=0.75) implemented here in plain Python; the terms are the reaction-type words and the character
4-grams of the product SMILES. The ``K`` best reactions are shown as user/assistant turns, most similar last,
then the product.
"""

import math
import re
from collections import Counter

SYSTEM = (
    "You are an expert organic chemist. Given a reaction type and a product SMILES, answer with the SMILES of "
    "the reactants only, separated by periods (.)."
)
K = 0
ANSWER_TOKENS = 128


def tokenize(question):
    reaction = re.search(r"reaction type is (.*?)\.?\n", question)
    product = re.search(r"Input:\s*(\S+)", question)
    words = reaction.group(1).lower().split() if reaction else []
    smiles = product.group(1) if product else question
    return ["type:" + w for w in words] + [smiles[i : i + 4] for i in range(max(len(smiles) - 3, 1))]


class BM25:
    def __init__(self, documents, k1=1.5, b=0.75):
        self.docs = [Counter(tokenize(doc)) for doc in documents]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.avg_length = sum(self.lengths) / max(len(self.docs), 1)
        frequency = Counter(term for doc in self.docs for term in doc)
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - df + 0.5) / (df + 0.5)) for term, df in frequency.items()}
        self.k1, self.b = k1, b

    def scores(self, query):
        terms = set(tokenize(query))
        result = []
        for doc, length in zip(self.docs, self.lengths, strict=False):
            norm = self.k1 * (1 - self.b + self.b * length / self.avg_length)
            result.append(
                sum(self.idf.get(t, 0.0) * doc[t] * (self.k1 + 1) / (doc[t] + norm) for t in terms if t in doc)
            )
        return result

    def top(self, query, k):
        scores = self.scores(query)
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:k]


def first_smiles(response):
    """The answer's first whitespace-separated token: the reactant SMILES joined by "."."""
    return response.strip().split()[0] if response.strip() else ""


class Harness:
    def __init__(self, lm, train):
        self.lm = lm
        self.train = train
        self.index = BM25([item["input"] for item in train])

    def _predict_before_rules_fallback(self, x):
        messages = [{"role": "system", "content": SYSTEM}]
        for i in reversed(self.index.top(x, K)):  # most similar last
            messages.append({"role": "user", "content": self.train[i]["input"].strip()})
            messages.append({"role": "assistant", "content": self.train[i]["target"]})
        messages.append({"role": "user", "content": x.strip()})
        return first_smiles(self.lm(messages, max_tokens=ANSWER_TOKENS, stop=["\n"]))

    def predict(self, x):
        answer = self._predict_before_rules_fallback(x)
        if isinstance(answer, str) and _canonical_smiles(answer):
            return answer
        ruled = _retro_rule_answer(x)
        return ruled or answer


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
    kind = re.search(r"reaction type is ([^.\n]+)", question)
    product = re.search(r"Input:\s*(\S+)", question)
    mol = Chem.MolFromSmiles(product.group(1)) if product else None
    if kind is None or mol is None:
        return None
    name = kind.group(1).strip().lower()
    rules = next((rules for key, rules in _RETRO_RULES.items() if name.startswith(key)), [])
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
