#include "meshtrain/model/param_module.h"

#include "meshtrain/core/error.h"

namespace meshtrain::model {

at::Tensor ParamModule::add_parameter(const std::string& name, at::Tensor t, at::Tensor* member) {
  *member = register_parameter(name, std::move(t));
  members_[name] = member;
  return *member;
}

void ParamModule::replace_parameter(const std::string& name, at::Tensor t) {
  auto it = members_.find(name);
  MT_CHECK(it != members_.end(), "replace_parameter: no parameter '", name, "' in ", this->name());
  t.set_requires_grad(it->second->requires_grad());
  parameters_[name] = t;
  *it->second = std::move(t);
}

void ParamModule::retire_parameter(const std::string& name, at::Tensor t) {
  auto it = members_.find(name);
  MT_CHECK(it != members_.end(), "retire_parameter: no parameter '", name, "' in ", this->name());
  parameters_.erase(name);
  *it->second = std::move(t);
  members_.erase(it);
}

void replace_parameters(torch::nn::Module& root,
                        const std::function<at::Tensor(const std::string&, const at::Tensor&)>& fn) {
  for (const auto& item : root.named_modules()) {
    auto* m = dynamic_cast<ParamModule*>(item.value().get());
    if (!m) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : m->named_parameters(/*recurse=*/false)) {
      auto next = fn(prefix + p.key(), p.value());
      if (!next.is_same(p.value())) m->replace_parameter(p.key(), std::move(next));
    }
  }
}

}  // namespace meshtrain::model
