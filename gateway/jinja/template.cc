#include "gateway/jinja/template.h"

namespace hearth::jinja {

Template Template::parse(std::string_view source, const ParseLimits& limits) {
  return Template(std::make_shared<const Program>(parse_template(source, limits)));
}

std::string Template::render(const DictData& variables, const RenderOptions& options) const {
  return render_program(*program_, variables, options);
}

}  // namespace hearth::jinja
